package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu/qemutest"
	"github.com/vesselhost/vessel/internal/state"
)

// fakeMigration is a fake VM's file migration: "migrate" writes the
// guest's "memory" (memory) to the file at once and leaves the VM in
// postmigrate, as QEMU does at the end of a save; "migrate-incoming"
// reads it back into memory.
type fakeMigration struct {
	status string // query-migrate's status ("" before any)
	memory string // what the guest "holds"
	fail   bool   // the next migration fails (QEMU resumes the VM)
}

// Stop pauses the fake VM's vCPUs.
func (m *fakeMonitor) Stop(ctx context.Context) error {
	return m.do("stop", func() { m.v.running, m.v.status = false, "paused" })
}

// Run answers the raw QMP commands qemu.Save and qemu.Load send.
func (m *fakeMonitor) Run(raw []byte) ([]byte, error) {
	var req struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	var ret any = map[string]any{}
	var err error
	derr := m.do(req.Execute, func() {
		v := m.v
		switch req.Execute {
		case "query-status":
			st := map[bool]string{true: "running", false: "paused"}[v.running]
			if v.status != "" && !v.running {
				st = v.status
			}
			ret = map[string]any{"status": st, "running": v.running}
		case "stop":
			v.running, v.status = false, "paused"
		case "cont":
			v.running, v.status = true, ""
		case "migrate-set-capabilities", "migrate-set-parameters", "migrate_cancel", "qom-set":
		case "query-memory-size-summary": // a load populates the RAM if its file holds most of it
			ret = map[string]any{"base-memory": 0}
		case "qom-list": // a load populates the RAM backend first
			ret = []map[string]string{{"name": "pc.ram", "type": "child<memory-backend-ram>"}}
		case "migrate", "migrate-incoming":
			var a struct {
				URI string `json:"uri"`
			}
			_ = json.Unmarshal(req.Arguments, &a)
			path, ok := strings.CutPrefix(a.URI, "file:")
			if !ok {
				err = fmt.Errorf("fake qmp: uri %q", a.URI)
				return
			}
			if v.mig.fail {
				v.mig.fail, v.mig.status = false, "failed"
				return
			}
			if req.Execute == "migrate" {
				if err = os.WriteFile(path, []byte(v.mig.memory), 0o600); err == nil {
					v.running, v.status, v.mig.status = false, "postmigrate", "completed"
				}
				return
			}
			var b []byte
			if b, err = os.ReadFile(path); err == nil {
				v.mig.memory, v.status, v.mig.status = string(b), "paused", "completed"
			}
		case "query-migrate":
			n := len(v.mig.memory)
			ret = map[string]any{"status": v.mig.status, "total-time": 40, "downtime": 5,
				"ram": map[string]any{"transferred": n, "total": n, "dirty-sync-count": 3}}
		default:
			err = fmt.Errorf("fake qmp: %s not known", req.Execute)
		}
	})
	if derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"return": ret})
}

// runningVM adds a VM and starts it; its guest holds memory.
func (td *testDaemon) runningVM(t *testing.T, name, memory string) *fakeVM {
	t.Helper()
	td.addInstance(t, name, state.StateStopped, vmRecord)
	td.setDisk(t, name, "disk v1")
	if err := changeState(t, td, name, api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	v := td.fvm.vm(name)
	v.mig.memory = memory
	return v
}

// setDisk writes the file readVolume reads into a VM's volume.
func (td *testDaemon) setDisk(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(td.storage.Path(containerVolume(name)), "disk"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (td *testDaemon) snapshotOp(t *testing.T, name string, req api.SnapshotsPost) (map[string]any, error) {
	t.Helper()
	op, err := td.CreateSnapshot(context.Background(), name, req)
	if err != nil {
		return nil, err
	}
	err = waitOp(t, op)
	return op.Render().Metadata, err
}

func (td *testDaemon) restoreOp(t *testing.T, name, snap string, req api.SnapshotRestorePost) error {
	t.Helper()
	op, err := td.RestoreSnapshot(context.Background(), name, snap, req)
	if err != nil {
		return err
	}
	return waitOp(t, op)
}

// TestVMSnapshotStateful: a stateful snapshot of a running VM saves its
// state live into the checkpoint volume, snapshots the disk while QEMU
// holds the VM stopped at the end, lets it run again; a stateful restore
// kills QEMU, rolls the disk back and loads the state into a new QEMU
// started with -incoming defer, which then runs; delete removes the file.
func TestVMSnapshotStateful(t *testing.T) {
	td := newTestDaemon(t)
	v := td.runningVM(t, "vm1", "memory at the snapshot")
	md, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true})
	if err != nil {
		t.Fatal(err)
	}
	if !v.running || td.fvm.vm("vm1") != v {
		t.Fatal("the VM does not run on after the snapshot")
	}
	if td.fvm.count("migrate vm1") != 1 || td.fvm.count("stop vm1") != 0 {
		t.Errorf("migrate %d, stop %d: want a live migrate and no stop of ours", td.fvm.count("migrate vm1"), td.fvm.count("stop vm1"))
	}
	rec, err := td.state.GetSnapshot("vm1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Stateful || rec.MemoryBytes == 0 || rec.FrozenMs <= 0 {
		t.Errorf("record %+v", rec)
	}
	if md["memory"] != "live" || md[api.MetaFrozenMs] == nil || md["ram_bytes"] == nil {
		t.Errorf("metadata %v", md)
	}
	state, err := os.ReadFile(td.vmStatePath("vm1", "s1"))
	if err != nil || string(state) != "memory at the snapshot" {
		t.Fatalf("state file %q, %v", state, err)
	}
	if got := td.readVolume(t, snapshotVolume("vm1", "s1")); got != "disk v1" {
		t.Errorf("snapshot disk %q", got)
	}

	// The guest goes on; then the restore.
	v.mig.memory = "memory later"
	td.setDisk(t, "vm1", "disk v2")
	if err := td.restoreOp(t, "vm1", "s1", api.SnapshotRestorePost{Stateful: true}); err == nil {
		t.Fatal("a stateful restore of a running VM without --force went through")
	}
	if err := td.restoreOp(t, "vm1", "s1", api.SnapshotRestorePost{Stateful: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	nv := td.fvm.vm("vm1")
	if nv == nil || nv == v || !nv.running {
		t.Fatalf("after restore: %+v (old %p)", nv, v)
	}
	if !nv.cfg.Incoming || !nv.cfg.Paused || nv.mig.memory != "memory at the snapshot" {
		t.Errorf("new qemu: incoming %v paused %v memory %q", nv.cfg.Incoming, nv.cfg.Paused, nv.mig.memory)
	}
	if got := td.readVolume(t, containerVolume("vm1")); got != "disk v1" {
		t.Errorf("disk after restore %q", got)
	}
	if got := td.status(t, "vm1"); got != api.StatusRunning {
		t.Errorf("status %s", got)
	}

	op, err := td.DeleteSnapshot(context.Background(), "vm1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := waitOp(t, op); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(td.vmStatePath("vm1", "s1"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file's volume left: %v", err)
	}
}

// TestVMSnapshotFailures: a save QEMU fails, and a fault after the save
// (VM stopped in postmigrate, disk snapshotted), leave nothing of the
// snapshot and the VM running; then the snapshot can be taken.
func TestVMSnapshotFailures(t *testing.T) {
	td := newTestDaemon(t)
	td.cfg.Faults = map[string]string{faultVMSaved: "fail"}
	v := td.runningVM(t, "vm1", "mem")
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: the snapshot went through", what)
		}
		t.Logf("%s: %v", what, err)
		if !v.running || v.status != "" {
			t.Errorf("%s: the VM does not run (status %q)", what, v.status)
		}
		if _, err := td.state.GetSnapshot("vm1", "s1"); err == nil {
			t.Errorf("%s: snapshot recorded", what)
		}
		for _, vol := range []string{td.storage.Path(snapshotVolume("vm1", "s1")), td.storage.Path(checkpointVolume("vm1", "s1"))} {
			if _, err := os.Stat(vol); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s left: %v", what, vol, err)
			}
		}
	}
	_, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true})
	if err == nil || !strings.Contains(err.Error(), faultVMSaved) {
		t.Errorf("fault: %v", err)
	}
	check("fault after the save", err)
	td.cfg.Faults = nil

	v.mig.fail = true
	_, err = td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true})
	check("failed migration", err)

	if _, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true}); err != nil {
		t.Fatal(err)
	}
}

// TestVMSnapshotDiskOnly: a disk-only snapshot of a running VM stops its
// vCPUs (QMP stop: QEMU flushes the disk) only for the copy; a disk-only
// restore of a running VM restarts it on the old disk; a stateful restore
// of it is refused; a stopped VM snapshots without QEMU.
func TestVMSnapshotDiskOnly(t *testing.T) {
	td := newTestDaemon(t)
	v := td.runningVM(t, "vm1", "mem")
	md, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if td.fvm.count("stop vm1") != 1 || td.fvm.count("cont vm1") != 2 || !v.running {
		t.Errorf("stop %d cont %d running %v", td.fvm.count("stop vm1"), td.fvm.count("cont vm1"), v.running)
	}
	if f, _ := md[api.MetaFrozenMs].(float64); f <= 0 {
		t.Errorf("metadata %v", md)
	}
	if _, err := os.Stat(td.storage.Path(checkpointVolume("vm1", "s1"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a disk-only snapshot made a checkpoint volume: %v", err)
	}
	if _, err := td.RestoreSnapshot(context.Background(), "vm1", "s1", api.SnapshotRestorePost{Stateful: true, Force: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("stateful restore of a disk-only snapshot: %v", err)
	}
	td.setDisk(t, "vm1", "disk v2")
	if err := td.restoreOp(t, "vm1", "s1", api.SnapshotRestorePost{Force: true}); err != nil {
		t.Fatal(err)
	}
	nv := td.fvm.vm("vm1")
	if nv == nil || nv == v || nv.cfg.Incoming || !nv.running {
		t.Fatalf("after restore: %+v", nv)
	}
	if got := td.readVolume(t, containerVolume("vm1")); got != "disk v1" {
		t.Errorf("disk after restore %q", got)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.CreateSnapshot(context.Background(), "vm1", api.SnapshotsPost{Name: "s3", Stateful: true}); err == nil {
		t.Error("a stateful snapshot of a stopped VM was accepted")
	}
}

// TestVMRestoreStatefulSizeChanged: a VM whose vCPUs or RAM changed since
// the snapshot cannot load its state: refused before it is stopped.
func TestVMRestoreStatefulSizeChanged(t *testing.T) {
	td := newTestDaemon(t)
	v := td.runningVM(t, "vm1", "mem")
	if _, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true}); err != nil {
		t.Fatal(err)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatal(err)
	}
	inst := td.insts.get("vm1")
	if err := td.save(inst, func(_ *state.Tx, rec *state.Instance) error {
		rec.Config = map[string]string{KeyMemory: "2GiB"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := td.RestoreSnapshot(context.Background(), "vm1", "s1", api.SnapshotRestorePost{Stateful: true})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "limits.memory") {
		t.Errorf("restore after a memory change: %v", err)
	}
	_ = v
}

// TestVMReconcileResumesLeftover: a daemon that died in a snapshot's
// stopped window left the VM stopped (postmigrate after a save, paused
// after a disk-only stop): the next one lets it run; a VM still in
// prelaunch is left alone.
func TestVMReconcileResumesLeftover(t *testing.T) {
	td := newTestDaemon(t)
	saved := td.runningVM(t, "vm1", "mem")
	stopped := td.runningVM(t, "vm2", "mem")
	starting := td.runningVM(t, "vm3", "mem")
	saved.running, saved.status = false, "postmigrate"
	stopped.running, stopped.status = false, "paused"
	starting.running = false
	next := td.restart(t)
	next.startDaemon(t)
	if !saved.running || !stopped.running {
		t.Errorf("left stopped: vm1 running %v, vm2 running %v", saved.running, stopped.running)
	}
	if starting.running {
		t.Error("a VM in prelaunch was let run")
	}
}

// TestVMRestoreKeepsRAM: a stateful restore stops the VM's QEMU without
// removing its RAM file or its cgroup (the file's pages are charged
// there), punches the pages the state does not hold out of the file, and
// starts the new QEMU on it; a state it cannot read (not mapped-ram) makes
// it load into fresh RAM; a stop removes the file, and a daemon start the
// files of VMs that do not run.
func TestVMRestoreKeepsRAM(t *testing.T) {
	td := newTestDaemon(t)
	st := qemutest.MappedRAM([]qemutest.Block{{Name: "pc.ram", Pages: 4, Present: []int64{0, 2}}})
	v := td.runningVM(t, "vm1", string(st))
	ramFile := td.cfg.vmRAMFile("vm1")
	if ramFile == "" || v.cfg.RAMFile != ramFile {
		t.Fatalf("qemu's ram file %q, want %q", v.cfg.RAMFile, ramFile)
	}
	// What the guest has in its RAM after the snapshot, as QEMU left it.
	stale := bytes.Repeat([]byte{0xa5}, 4*qemutest.PageSize)
	writeRAM := func() {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(ramFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ramFile, stale, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeRAM()
	if _, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s1", Stateful: true}); err != nil {
		t.Fatal(err)
	}
	cg := td.cfg.cgroupPath("vm1")
	destroys := td.fcg.get(cg).destroys
	op, err := td.RestoreSnapshot(context.Background(), "vm1", "s1", api.SnapshotRestorePost{Stateful: true, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitOp(t, op); err != nil {
		t.Fatal(err)
	}
	nv := td.fvm.vm("vm1")
	if nv == v || len(nv.ramAtStart) != len(stale) {
		t.Fatalf("new qemu started on %d bytes of ram file", len(nv.ramAtStart))
	}
	// Into kept RAM the new QEMU keeps transparent huge pages.
	if nv.cfg.NoTHP {
		t.Errorf("the qemu restoring into kept ram runs without transparent huge pages")
	}
	for p := range 4 {
		pg := nv.ramAtStart[p*qemutest.PageSize : (p+1)*qemutest.PageSize]
		want := byte(0)
		if p == 0 || p == 2 { // the state's pages: the load overwrites them
			want = 0xa5
		}
		if pg[0] != want || pg[len(pg)-1] != want {
			t.Errorf("page %d of the kept ram holds %#x, want %#x", p, pg[0], want)
		}
	}
	if got := td.fcg.get(cg).destroys; got != destroys {
		t.Errorf("the VM's cgroup was destroyed %d times in the restore", got-destroys)
	}
	md := op.Render().Metadata
	if md["ram_punched_bytes"] != int64(2*qemutest.PageSize) || md["ram_kept_bytes"] == int64(0) {
		t.Errorf("metadata %v", md)
	}

	// A state file it cannot read: the restore loads into fresh RAM.
	writeRAM()
	nv.mig.memory = "not a mapped-ram file"
	if _, err := td.snapshotOp(t, "vm1", api.SnapshotsPost{Name: "s2", Stateful: true}); err != nil {
		t.Fatal(err)
	}
	if err := td.restoreOp(t, "vm1", "s2", api.SnapshotRestorePost{Stateful: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	if nv = td.fvm.vm("vm1"); nv.ramAtStart != nil {
		t.Errorf("restored onto a ram file (%d bytes) the state could not clear", len(nv.ramAtStart))
	}
	if !nv.cfg.NoTHP {
		t.Errorf("the qemu restoring into fresh ram has transparent huge pages")
	}

	// A stop removes the file.
	writeRAM()
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ramFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ram file after a stop: %v", err)
	}

	// A daemon start removes the RAM files of VMs that do not run.
	v2 := td.runningVM(t, "vm2", "")
	for _, f := range []string{ramFile, v2.cfg.RAMFile, filepath.Join(filepath.Dir(ramFile), "gone.ram")} {
		if err := os.WriteFile(f, stale, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	td.dropUnusedVMRAM()
	if _, err := os.Stat(v2.cfg.RAMFile); err != nil {
		t.Errorf("a running VM's ram file: %v", err)
	}
	for _, f := range []string{ramFile, filepath.Join(filepath.Dir(ramFile), "gone.ram")} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the start: %v", f, err)
		}
	}
}
