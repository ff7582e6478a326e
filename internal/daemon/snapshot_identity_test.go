package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/utsns"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/testutil"
)

func TestRestoreIdentity(t *testing.T) {
	own := state.Snapshot{Name: "s", TakenAs: "web1"}
	legacy := state.Snapshot{Name: "s"} // a record from before TakenAs
	foreign := state.Snapshot{Name: "s", ForeignIdentity: true, TakenAs: "web1"}
	for _, tc := range []struct {
		name string
		s    state.Snapshot
		inst string
		vm   bool
		want identityAction
	}{
		{"a container's own snapshot", own, "web1", false, identityKeep},
		{"a VM's own snapshot", own, "web1", true, identityKeep},
		{"a container's own snapshot from before TakenAs", legacy, "web1", false, identityKeep},
		{"a copy's container snapshot", foreign, "web2", false, identityRewrite},
		{"a copy's VM snapshot", foreign, "web2", true, identityNewBoot},
		// A copy to another host may keep its source's name: the mark
		// decides, not the names.
		{"a copy's snapshot under its source's name", foreign, "web1", false, identityRewrite},
		{"a copy's VM snapshot under its source's name", foreign, "web1", true, identityNewBoot},
		// Renamed by a move: the same machine, under a new name.
		{"a renamed container's own snapshot", own, "web2", false, identityRename},
		{"a renamed VM's own snapshot (its name is on its command line)", own, "web2", true, identityKeep},
		// A copy renamed by a move later: still another machine's.
		{"a renamed copy's snapshot", foreign, "web3", false, identityRewrite},
		{"a renamed VM copy's snapshot", foreign, "web3", true, identityNewBoot},
	} {
		if got := restoreIdentity(tc.s, tc.inst, tc.vm); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Every copy, local or to a peer (snapshotForCopy on both paths),
	// marks its snapshots; the source's stay unmarked.
	if got := snapshotForCopy(own, false); !got.ForeignIdentity {
		t.Error("a copy's snapshot is not marked")
	}
}

const (
	sourceMachineID = "0123456789abcdef0123456789abcdef\n"
	utsnsImage      = "utsns-12.img"
)

// putIdentity gives vol the identity files of a root named host.
func putIdentity(t *testing.T, td *testDaemon, vol storage.Volume, host string) {
	t.Helper()
	dir := filepath.Join(td.storage.Path(vol), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, c := range map[string]string{"hostname": host + "\n", "hosts": "127.0.1.1\t" + host + "\n", "machine-id": sourceMachineID} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// identityOf reads vol's hostname and machine ID.
func identityOf(t *testing.T, td *testDaemon, vol storage.Volume) (host, machineID string) {
	t.Helper()
	root := td.storage.Path(vol)
	h, err := os.ReadFile(filepath.Join(root, "etc/hostname"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := os.ReadFile(filepath.Join(root, "etc/machine-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(h)), string(id)
}

// putCheckpointImages writes into vol the images a stateful restore of
// an unprivileged container reads and rewrites: its tasks in one user
// namespace of a block of ids (runtime.MapUserns), and its UTS
// namespace named nodename.
func putCheckpointImages(t *testing.T, td *testDaemon, vol storage.Volume, nodename string) {
	t.Helper()
	dir := td.storage.Path(vol)
	testutil.WriteCRIUImage(t, filepath.Join(dir, "inventory.img"), "INVENTORY",
		&inventory.InventoryEntry{ImgVersion: proto.Uint32(2), RootIds: &criucore.TaskKobjIdsEntry{UserNsId: proto.Uint32(1)}})
	testutil.WriteCRIUImage(t, filepath.Join(dir, "ids-1.img"), "IDS", &criucore.TaskKobjIdsEntry{UserNsId: proto.Uint32(14)})
	ext := func(host uint32) []*userns.UidGidExtent {
		return []*userns.UidGidExtent{{First: proto.Uint32(0), LowerFirst: proto.Uint32(host), Count: proto.Uint32(idmapSize)}}
	}
	testutil.WriteCRIUImage(t, filepath.Join(dir, "userns-14.img"), "USERNS", &userns.UsernsEntry{UidMap: ext(1000000), GidMap: ext(1000000)})
	testutil.WriteCRIUImage(t, filepath.Join(dir, utsnsImage), "UTSNS",
		&utsns.UtsnsEntry{Nodename: proto.String(nodename), Domainname: proto.String("(none)")})
}

// utsName reads the nodename in a checkpoint volume's UTS image.
func utsName(t *testing.T, td *testDaemon, vol storage.Volume) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(td.storage.Path(vol), utsnsImage))
	if err != nil {
		t.Fatal(err)
	}
	// The image: two magics, a length, the entry.
	var ue utsns.UtsnsEntry
	if err := proto.Unmarshal(b[12:], &ue); err != nil {
		t.Fatal(err)
	}
	return ue.GetNodename()
}

// TestCopySnapshotIdentity: a copy's snapshots are the source's disks as
// they were (the source's identity in them); restoring one in the copy
// gives the copy its own hostname, hosts entry and an empty machine ID,
// and a stateful restore its own name in the UTS namespace; restoring the
// same snapshot in the source keeps the source's (its machine ID, and the
// name its UTS namespace had, even one set inside).
func TestCopySnapshotIdentity(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	td.putSnapshot(t, "c1", "s1", "c1 at s1")
	putIdentity(t, td, snapshotVolume("c1", "s1"), "c1")
	td.putStatefulSnapshot(t, "c1", "s2", "c1 at s2", "memory")
	putIdentity(t, td, snapshotVolume("c1", "s2"), "c1")
	putCheckpointImages(t, td, checkpointVolume("c1", "s2"), "set-inside")

	if err := td.copyLocal(t, "c1", "c2", false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if rec, err := td.state.GetSnapshot("c2", s); err != nil || !rec.ForeignIdentity {
			t.Errorf("the copy's %s: %+v, %v; want it marked", s, rec, err)
		}
		if rec, _ := td.state.GetSnapshot("c1", s); rec.ForeignIdentity {
			t.Errorf("the source's %s was marked", s)
		}
		// The copy's snapshot is the source's disk, untouched.
		if h, id := identityOf(t, td, snapshotVolume("c2", s)); h != "c1" || id != sourceMachineID {
			t.Errorf("the copy's %s holds %q, %q", s, h, id)
		}
	}
	restore := func(name, snap string, stateful bool) {
		t.Helper()
		if err := td.restoreOp(t, name, snap, api.SnapshotRestorePost{Stateful: stateful, Force: true}); err != nil {
			t.Fatalf("restore %s/%s: %v", name, snap, err)
		}
	}
	restore("c2", "s1", false)
	if h, id := identityOf(t, td, containerVolume("c2")); h != "c2" || id != "" {
		t.Errorf("the copy after restoring s1: hostname %q, machine ID %q", h, id)
	}
	if b, _ := os.ReadFile(filepath.Join(td.storage.Path(containerVolume("c2")), "etc/hosts")); !strings.Contains(string(b), "\tc2\n") {
		t.Errorf("the copy's /etc/hosts after restoring s1: %q", b)
	}
	if got := td.readVolume(t, containerVolume("c2")); got != "c1 at s1" {
		t.Errorf("the copy's disk after restoring s1: %q", got)
	}
	restore("c1", "s1", false)
	if h, id := identityOf(t, td, containerVolume("c1")); h != "c1" || id != sourceMachineID {
		t.Errorf("the source after restoring s1: hostname %q, machine ID %q", h, id)
	}

	restore("c2", "s2", true)
	if got := utsName(t, td, checkpointVolume("c2", "s2")); got != "c2" {
		t.Errorf("the copy's stateful restore ran under UTS name %q", got)
	}
	if h, id := identityOf(t, td, containerVolume("c2")); h != "c2" || id != "" {
		t.Errorf("the copy after restoring s2: hostname %q, machine ID %q", h, id)
	}
	restore("c1", "s2", true)
	if got := utsName(t, td, checkpointVolume("c1", "s2")); got != "set-inside" {
		t.Errorf("the source's stateful restore ran under UTS name %q", got)
	}
	if h, id := identityOf(t, td, containerVolume("c1")); h != "c1" || id != sourceMachineID {
		t.Errorf("the source after restoring s2: hostname %q, machine ID %q", h, id)
	}
}

// TestVMCopySnapshotIdentity: a VM's disk is the guest's (vessel does not
// write into it): restoring a copy's snapshot marks the copy for a new
// machine ID at its next boot, which asks the guest's init for it and
// clears the mark; restoring the source's own does not.
func TestVMCopySnapshotIdentity(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	td.putSnapshot(t, "vm1", "d1", "vm1 at d1")
	if err := td.copyLocal(t, "vm1", "vm2", false); err != nil {
		t.Fatal(err)
	}
	newID := func(name string) bool {
		t.Helper()
		rec, err := td.state.GetInstance(name)
		if err != nil {
			t.Fatal(err)
		}
		return rec.NewIdentity
	}
	boot := func(name string) string {
		t.Helper()
		if err := changeState(t, td, name, api.InstanceStatePut{Action: "start"}); err != nil {
			t.Fatal(err)
		}
		v := td.fvm.vm(name)
		if v == nil {
			t.Fatalf("%s did not start", name)
		}
		cmdline := v.cfg.Cmdline
		if err := changeState(t, td, name, api.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			t.Fatal(err)
		}
		return cmdline
	}
	if cmd := boot("vm2"); !strings.Contains(cmd, "vessel.newid=1") || newID("vm2") {
		t.Fatalf("the copy's first boot: %q, mark left %v", cmd, newID("vm2"))
	}
	if cmd := boot("vm2"); strings.Contains(cmd, "vessel.newid=1") {
		t.Fatalf("the copy's second boot asks for a new ID: %q", cmd)
	}
	if err := td.restoreOp(t, "vm2", "d1", api.SnapshotRestorePost{}); err != nil {
		t.Fatal(err)
	}
	if !newID("vm2") {
		t.Fatal("the copy restored its source's snapshot unmarked")
	}
	if cmd := boot("vm2"); !strings.Contains(cmd, "vessel.newid=1") || newID("vm2") {
		t.Fatalf("the copy's boot after the restore: %q, mark left %v", cmd, newID("vm2"))
	}
	if err := td.restoreOp(t, "vm1", "d1", api.SnapshotRestorePost{}); err != nil {
		t.Fatal(err)
	}
	if newID("vm1") {
		t.Fatal("the source restoring its own snapshot was marked")
	}
	if cmd := boot("vm1"); strings.Contains(cmd, "vessel.newid=1") {
		t.Fatalf("the source's boot after its own restore: %q", cmd)
	}
}

// TestReconcileRollbackForeignIdentity: a restore of a copy's snapshot
// that a daemon's death interrupted is finished at the next start with
// the copy's identity (a container's files, a VM's next boot), as the
// restore would have.
func TestReconcileRollbackForeignIdentity(t *testing.T) {
	td := newTestDaemon(t)
	td.putInstance(t, "c2", state.StateStopped, func(r *state.Instance) { r.RollingBack = "s1" })
	td.putInstance(t, "vm2", state.StateStopped, vmRecord, func(r *state.Instance) { r.RollingBack = "d1" })
	for _, s := range []state.Snapshot{{Instance: "c2", Name: "s1"}, {Instance: "vm2", Name: "d1"}} {
		s.ForeignIdentity = true
		if err := td.state.CreateSnapshot(s); err != nil {
			t.Fatal(err)
		}
		td.writeVolume(t, snapshotVolume(s.Instance, s.Name), "copied")
	}
	putIdentity(t, td, snapshotVolume("c2", "s1"), "c1")

	td.startDaemon(t)

	if h, id := identityOf(t, td, containerVolume("c2")); h != "c2" || id != "" {
		t.Errorf("the container after the finished restore: hostname %q, machine ID %q", h, id)
	}
	if rec, _ := td.storedInstance(t, "vm2"); rec.RollingBack != "" || !rec.NewIdentity {
		t.Errorf("the VM after the finished restore: %+v", rec)
	}
}

// TestWireCarriesNewIdentity: a VM copy that moves before the boot that
// would empty its machine ID keeps the mark on the wire.
func TestWireCarriesNewIdentity(t *testing.T) {
	rec := state.Instance{Name: "vm2", Type: state.TypeVM, NewIdentity: true}
	if got := fromWire(toWire(rec)); !got.NewIdentity {
		t.Fatalf("%+v", got)
	}
}

// TestRenamedSnapshotIdentity: a snapshot records the name it was taken
// under; one taken before a move renamed the instance restores with the
// instance's current name on its disk and, stateful, in its UTS
// namespace, and keeps the machine ID (the same machine); one taken under
// the current name is restored as it is (a name set inside kept).
func TestRenamedSnapshotIdentity(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "web2", state.StateStopped)
	if _, err := td.snapshotOp(t, "web2", api.SnapshotsPost{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := td.state.GetSnapshot("web2", "taken"); err != nil || rec.TakenAs != "web2" {
		t.Fatalf("a new snapshot's record: %+v, %v; want it taken as web2", rec, err)
	}
	// Two snapshots that came with a move that renamed web1 to web2.
	put := func(snap string, stateful bool) {
		t.Helper()
		if err := td.state.CreateSnapshot(state.Snapshot{Instance: "web2", Name: snap, Stateful: stateful, TakenAs: "web1"}); err != nil {
			t.Fatal(err)
		}
		td.writeVolume(t, snapshotVolume("web2", snap), "web2 at "+snap)
		putIdentity(t, td, snapshotVolume("web2", snap), "web1")
		if stateful {
			td.writeVolume(t, checkpointVolume("web2", snap), "memory")
			putCheckpointImages(t, td, checkpointVolume("web2", snap), "web1")
		}
	}
	put("s1", false)
	put("s2", true)
	check := func(what string) {
		t.Helper()
		if h, id := identityOf(t, td, containerVolume("web2")); h != "web2" || id != sourceMachineID {
			t.Errorf("%s: hostname %q, machine ID %q", what, h, id)
		}
		if b, _ := os.ReadFile(filepath.Join(td.storage.Path(containerVolume("web2")), "etc/hosts")); !strings.Contains(string(b), "\tweb2\n") {
			t.Errorf("%s: /etc/hosts %q", what, b)
		}
	}
	if err := td.restoreOp(t, "web2", "s1", api.SnapshotRestorePost{Force: true}); err != nil {
		t.Fatal(err)
	}
	check("after restoring s1")
	if err := td.restoreOp(t, "web2", "s2", api.SnapshotRestorePost{Stateful: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	check("after restoring s2 (stateful)")
	if got := utsName(t, td, checkpointVolume("web2", "s2")); got != "web2" {
		t.Errorf("the stateful restore ran under UTS name %q", got)
	}
	if got := td.readVolume(t, containerVolume("web2")); got != "web2 at s2" {
		t.Errorf("the disk after restoring s2: %q", got)
	}

	// Taken under the current name: as it is.
	if err := td.state.CreateSnapshot(state.Snapshot{Instance: "web2", Name: "s3", Stateful: true, TakenAs: "web2"}); err != nil {
		t.Fatal(err)
	}
	td.writeVolume(t, snapshotVolume("web2", "s3"), "web2 at s3")
	putIdentity(t, td, snapshotVolume("web2", "s3"), "set-inside")
	td.writeVolume(t, checkpointVolume("web2", "s3"), "memory")
	putCheckpointImages(t, td, checkpointVolume("web2", "s3"), "set-inside")
	if err := td.restoreOp(t, "web2", "s3", api.SnapshotRestorePost{Stateful: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	if got := utsName(t, td, checkpointVolume("web2", "s3")); got != "set-inside" {
		t.Errorf("the own snapshot's restore ran under UTS name %q", got)
	}
	if h, id := identityOf(t, td, containerVolume("web2")); h != "set-inside" || id != sourceMachineID {
		t.Errorf("after restoring s3: hostname %q, machine ID %q", h, id)
	}
}
