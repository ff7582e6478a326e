package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// putStatefulSnapshot is putSnapshot of a stateful snapshot: its
// checkpoint volume holds the file "disk" with memory.
func (td *testDaemon) putStatefulSnapshot(t *testing.T, name, snap, content, memory string) {
	t.Helper()
	if err := td.state.CreateSnapshot(state.Snapshot{Instance: name, Name: snap, Created: time.Now().UTC(),
		Stateful: true, MemoryBytes: uint64(len(memory)), Config: map[string]string{"limits.cpu": "1"}}); err != nil {
		t.Fatal(err)
	}
	td.writeVolume(t, snapshotVolume(name, snap), content)
	td.writeVolume(t, checkpointVolume(name, snap), memory)
}

// copyLocal copies src (NAME or NAME/SNAP) to name here and waits.
func (td *testDaemon) copyLocal(t *testing.T, src, name string, instanceOnly bool) error {
	t.Helper()
	op, err := td.CreateInstance(context.Background(), api.InstancesPost{Name: name,
		Source: api.InstanceSource{Type: "copy", Source: src, InstanceOnly: instanceOnly}})
	if err != nil {
		return err
	}
	return waitOp(t, op)
}

// snapshotNames lists name's snapshot records.
func (td *testDaemon) snapshotNames(t *testing.T, name string) []string {
	t.Helper()
	recs, err := td.state.ListSnapshots(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Name)
	}
	return out
}

// volumesOf lists the pool's volumes of instance name (its own, its
// snapshots' and checkpoints').
func (td *testDaemon) volumesOf(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, typ := range []storage.VolumeType{storage.VolumeContainer, storage.VolumeSnapshot, storage.VolumeCheckpoint} {
		vols, err := td.storage.ListVolumes(context.Background(), typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if inst, _, _ := strings.Cut(v.Name, "/"); inst == name {
				out = append(out, v.String())
			}
		}
	}
	return out
}

// TestCopyCarriesSnapshots: a local copy of a container gets its
// snapshots, a stateful one with its checkpoint, as volumes and records
// of its own that outlive the source's; --instance-only and a copy of a
// snapshot get none.
func TestCopyCarriesSnapshots(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	td.putSnapshot(t, "c1", "s1", "c1 at s1")
	td.putStatefulSnapshot(t, "c1", "s2", "c1 at s2", "memory of c1 at s2")

	if err := td.copyLocal(t, "c1", "c2", false); err != nil {
		t.Fatal(err)
	}
	if got := td.snapshotNames(t, "c2"); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("copy's snapshots %v", got)
	}
	s2, err := td.state.GetSnapshot("c2", "s2")
	if err != nil || !s2.Stateful || s2.MemoryBytes == 0 || s2.Config["limits.cpu"] != "1" {
		t.Fatalf("copy's stateful snapshot %+v, %v", s2, err)
	}
	if s1, _ := td.state.GetSnapshot("c2", "s1"); s1.Stateful {
		t.Fatalf("copy's disk snapshot became stateful: %+v", s1)
	}
	if td.storage.VolumeExists(checkpointVolume("c2", "s1")) {
		t.Error("a disk snapshot's copy has a checkpoint")
	}
	for _, name := range []string{"c3", "c4"} {
		src, only := "c1", true
		if name == "c4" {
			src, only = "c1/s1", false
		}
		if err := td.copyLocal(t, src, name, only); err != nil {
			t.Fatal(err)
		}
		if got := td.snapshotNames(t, name); len(got) != 0 {
			t.Errorf("copy of %s (instance only %v) has snapshots %v", src, only, got)
		}
		if got := td.volumesOf(t, name); !slices.Equal(got, []string{containerVolume(name).String()}) {
			t.Errorf("copy of %s (instance only %v) has volumes %v", src, only, got)
		}
	}
	if got := td.readVolume(t, containerVolume("c4")); got != "c1 at s1" {
		t.Errorf("copy of c1/s1: disk %q", got)
	}

	// The copy's snapshots are its own: the source's going leaves them.
	op, err := td.DeleteSnapshot(context.Background(), "c1", "s1")
	if err == nil {
		err = waitOp(t, op)
	}
	if err != nil {
		t.Fatal(err)
	}
	op, err = td.DeleteInstance(context.Background(), "c1", false)
	if err == nil {
		err = waitOp(t, op)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := td.readVolume(t, snapshotVolume("c2", "s1")); got != "c1 at s1" {
		t.Errorf("copy's s1 after the source went: %q", got)
	}
	if got := td.readVolume(t, snapshotVolume("c2", "s2")); got != "c1 at s2" {
		t.Errorf("copy's s2 after the source went: %q", got)
	}
	if got := td.readVolume(t, checkpointVolume("c2", "s2")); got != "memory of c1 at s2" {
		t.Errorf("copy's s2 checkpoint after the source went: %q", got)
	}
	// And a disk restore of the copy's snapshot works.
	op, err = td.RestoreSnapshot(context.Background(), "c2", "s1", api.SnapshotRestorePost{})
	if err == nil {
		err = waitOp(t, op)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := td.readVolume(t, containerVolume("c2")); got != "c1 at s1" {
		t.Errorf("copy's disk after restoring s1: %q", got)
	}
}

// TestCopyFailureLeavesNothing: a copy that fails while it copies the
// snapshots leaves no instance, record or volume of the copy; the
// source and its snapshots stay as they were.
func TestCopyFailureLeavesNothing(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	td.putSnapshot(t, "c1", "s1", "c1 at s1")
	td.putStatefulSnapshot(t, "c1", "s2", "c1 at s2", "memory")
	td.cfg.Faults = map[string]string{faultCopySnapshot: "fail"}
	err := td.copyLocal(t, "c1", "c2", false)
	if err == nil || !strings.Contains(err.Error(), faultCopySnapshot) {
		t.Fatalf("copy: %v", err)
	}
	if _, ok := td.storedInstance(t, "c2"); ok || td.insts.get("c2") != nil {
		t.Error("the failed copy's record stays")
	}
	if got := td.snapshotNames(t, "c2"); len(got) != 0 {
		t.Errorf("the failed copy's snapshot records stay: %v", got)
	}
	if got := td.volumesOf(t, "c2"); len(got) != 0 {
		t.Errorf("the failed copy's volumes stay: %v", got)
	}
	if got := td.snapshotNames(t, "c1"); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Errorf("source's snapshots %v", got)
	}
	if got := td.volumesOf(t, "c1"); len(got) != 4 {
		t.Errorf("source's volumes %v", got)
	}
	// Without the fault, the same copy goes through.
	td.cfg.Faults = nil
	if err := td.copyLocal(t, "c1", "c2", false); err != nil {
		t.Fatal(err)
	}
}

// TestCopyBadInput: a copy request the daemon cannot honour is refused
// up front, and nothing is made.
func TestCopyBadInput(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	ctx := context.Background()
	for _, tc := range []struct {
		req  api.InstancesPost
		kind error
	}{
		{api.InstancesPost{Name: "x", Source: api.InstanceSource{Image: "busybox", InstanceOnly: true}}, ErrInvalid},
		{api.InstancesPost{Name: "x", Source: api.InstanceSource{Type: "copy", InstanceOnly: true}}, ErrInvalid},
		{api.InstancesPost{Name: "x", Source: api.InstanceSource{Type: "copy", Source: "c1/no-such"}}, ErrNotFound},
		{api.InstancesPost{Name: "x", Source: api.InstanceSource{Type: "copy", Source: "c1/../x"}}, ErrInvalid},
		{api.InstancesPost{Name: "c1", Source: api.InstanceSource{Type: "copy", Source: "c1"}}, ErrConflict},
	} {
		if _, err := td.CreateInstance(ctx, tc.req); !errors.Is(err, tc.kind) {
			t.Errorf("%+v: %v, want %v", tc.req, err, tc.kind)
		}
	}
	if got := td.volumesOf(t, "x"); len(got) != 0 {
		t.Errorf("volumes made: %v", got)
	}
}

// TestVMCopySnapshotsDiskOnly: a VM's copy gets its snapshots as disk
// snapshots: a stateful one's saved memory holds the source's MAC and
// address, so its state stays behind (snapshotForCopy).
func TestVMCopySnapshotsDiskOnly(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	td.putStatefulSnapshot(t, "vm1", "s1", "vm1 at s1", "memory of vm1")
	if err := td.copyLocal(t, "vm1", "vm2", false); err != nil {
		t.Fatal(err)
	}
	// The copy's guest gets a machine ID of its own at its first boot;
	// the source's record is not marked.
	if rec, err := td.state.GetInstance("vm2"); err != nil || !rec.NewIdentity {
		t.Errorf("VM copy's record %+v, %v: want NewIdentity", rec, err)
	}
	if rec, _ := td.state.GetInstance("vm1"); rec.NewIdentity {
		t.Error("the source VM was marked for a new identity")
	}
	s1, err := td.state.GetSnapshot("vm2", "s1")
	if err != nil || s1.Stateful || s1.MemoryBytes != 0 {
		t.Fatalf("VM copy's snapshot %+v, %v", s1, err)
	}
	if td.storage.VolumeExists(checkpointVolume("vm2", "s1")) {
		t.Error("VM copy's snapshot has a checkpoint")
	}
	if got := td.readVolume(t, snapshotVolume("vm2", "s1")); got != "vm1 at s1" {
		t.Errorf("VM copy's snapshot disk %q", got)
	}
	if _, err := td.RestoreSnapshot(context.Background(), "vm2", "s1", api.SnapshotRestorePost{Stateful: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("stateful restore of the copy's disk snapshot: %v", err)
	}
	// The source's stays stateful.
	if s, _ := td.state.GetSnapshot("vm1", "s1"); !s.Stateful {
		t.Errorf("source's snapshot %+v", s)
	}
	if _, err := os.Stat(filepath.Join(td.storage.Path(checkpointVolume("vm1", "s1")), "disk")); err != nil {
		t.Error(err)
	}
}

func TestSnapshotForCopy(t *testing.T) {
	// Every copied snapshot holds the source's identity.
	marked := func(s state.Snapshot) state.Snapshot { s.ForeignIdentity = true; return s }
	s := state.Snapshot{Name: "s", Stateful: true, DiskBytes: 10, MemoryBytes: 20}
	if got := snapshotForCopy(s, false); !reflect.DeepEqual(got, marked(s)) {
		t.Errorf("container: %+v", got)
	}
	if got := snapshotForCopy(s, true); got.Stateful || got.MemoryBytes != 0 || got.DiskBytes != 10 || !got.ForeignIdentity {
		t.Errorf("VM: %+v", got)
	}
	d := state.Snapshot{Name: "d", DiskBytes: 10}
	if got := snapshotForCopy(d, true); !reflect.DeepEqual(got, marked(d)) {
		t.Errorf("VM disk snapshot: %+v", got)
	}
}

// TestCopyInterruptedByCrash: a daemon killed while a copy copied the
// snapshots (its record still "creating", some snapshots recorded, one
// cloned but not yet recorded) leaves nothing of the copy after the next
// start; the source keeps its snapshots.
func TestCopyInterruptedByCrash(t *testing.T) {
	td := newTestDaemon(t)
	td.putInstance(t, "c1", state.StateStopped)
	td.putSnapshot(t, "c1", "s1", "c1 at s1")
	td.putStatefulSnapshot(t, "c1", "s2", "c1 at s2", "memory")
	td.putInstance(t, "c2", state.StateCreating)
	td.putSnapshot(t, "c2", "s1", "c1 at s1")
	td.writeVolume(t, snapshotVolume("c2", "s2"), "c1 at s2")
	td.writeVolume(t, checkpointVolume("c2", "s2"), "memory")

	td.startDaemon(t)

	if _, ok := td.storedInstance(t, "c2"); ok {
		t.Error("the interrupted copy's record stays")
	}
	if got := td.snapshotNames(t, "c2"); len(got) != 0 {
		t.Errorf("the interrupted copy's snapshot records stay: %v", got)
	}
	if got := td.volumesOf(t, "c2"); len(got) != 0 {
		t.Errorf("the interrupted copy's volumes stay: %v", got)
	}
	if got := td.snapshotNames(t, "c1"); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Errorf("source's snapshots %v", got)
	}
	if got := td.volumesOf(t, "c1"); len(got) != 4 {
		t.Errorf("source's volumes %v", got)
	}
}
