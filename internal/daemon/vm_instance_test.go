package daemon

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/state"
)

func TestSizeVM(t *testing.T) {
	s, err := sizeVM("vm1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != 1 || s.MemoryMiB != 1024 || s.Throttle != nil {
		t.Errorf("defaults: %+v", s)
	}
	// The guest's 1 GiB, plus QEMU's overhead, plus 1/32 of the RAM.
	if want := "1442840576"; s.Cgroup[KeyMemory] != want {
		t.Errorf("cgroup memory %s, want %s", s.Cgroup[KeyMemory], want)
	}
	if s.Cgroup[KeyProcesses] != "1024" {
		t.Errorf("pids %q", s.Cgroup[KeyProcesses])
	}

	cfg := map[string]string{KeyCPU: "1.5", KeyMemory: "2GiB", KeyDiskRead: "10MB", KeyDiskWriteOps: "200iops", KeyDiskWeight: "300"}
	s, err = sizeVM("vm1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != 2 || s.MemoryMiB != 2048 {
		t.Errorf("sized %d cpus %d MiB, want 2 and 2048", s.CPUs, s.MemoryMiB)
	}
	if s.Throttle == nil || s.Throttle.BPSRd != 10_000_000 || s.Throttle.IOPSWr != 200 || s.Throttle.BPSWr != 0 ||
		s.Throttle.ID != qemu.RootDiskID || s.Throttle.Group != "vessel-vm1" {
		t.Errorf("throttle %+v", s.Throttle)
	}
	if s.Cgroup[KeyCPU] != "1.5" || s.Cgroup[KeyDiskWeight] != "300" {
		t.Errorf("cgroup keeps the cpu quota and disk weight: %v", s.Cgroup)
	}
	for _, k := range []string{KeyDiskRead, KeyDiskWriteOps} {
		if _, ok := s.Cgroup[k]; ok {
			t.Errorf("cgroup got %s: the disk limits are QEMU's", k)
		}
	}
	if cfg[KeyMemory] != "2GiB" {
		t.Error("sizeVM changed the configuration it read")
	}
}

func vmRecord(r *state.Instance) {
	r.Type = state.TypeVM
	r.StopSignal = "SIGUSR2"
}

func changeState(t *testing.T, td *testDaemon, name string, req api.InstanceStatePut) error {
	t.Helper()
	op, err := td.ChangeState(context.Background(), name, req)
	if err != nil {
		return err
	}
	return waitOp(t, op)
}

// TestVMStartStop: a VM starts on a tap with its limits in its cgroup
// (QEMU's pid there before the guest runs), its disk throttled through
// QMP and then let run; a stop presses the ACPI power button, and the
// cleanup releases the tap, the cgroup and the run directory.
func TestVMStartStop(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord, func(r *state.Instance) {
		r.Config = map[string]string{KeyCPU: "2", KeyMemory: "512MiB", KeyDiskWrite: "20MB"}
	})
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	v := td.fvm.vm("vm1")
	if v == nil {
		t.Fatal("no qemu started")
	}
	c := v.cfg
	if c.CPUs != 2 || c.MemoryMiB != 512 || !c.Paused || c.Accel != qemu.AccelTCG || c.Net == nil || c.Net.Tap != "vtvm1" {
		t.Errorf("qemu config %+v", c)
	}
	for _, want := range []string{"root=/dev/vda", "vessel.hostname=vm1", "vessel.stopsignal=SIGUSR2", "vessel.net=" + c.Net.MAC + ","} {
		if !strings.Contains(c.Cmdline, want) {
			t.Errorf("cmdline %q has no %q", c.Cmdline, want)
		}
	}
	if !strings.HasSuffix(c.Disk.Path, "/containers/vm1/disk.img") || c.ConsoleLog != td.cfg.logPath("vm1") {
		t.Errorf("disk %q, console %q", c.Disk.Path, c.ConsoleLog)
	}
	if !v.running || v.throttle == nil || v.throttle.BPSWr != 20_000_000 {
		t.Errorf("running %v, throttle %+v", v.running, v.throttle)
	}
	cg := td.cgroup("vm1")
	if !slices.Contains(cg.pids, v.pid) || len(cg.sets) == 0 {
		t.Fatalf("cgroup %+v: qemu's pid %d not in it", cg, v.pid)
	}
	if last := cg.sets[len(cg.sets)-1]; last.MemoryMax != 512<<20+vmMemoryOverhead+16<<20 || last.PidsMax != vmPidsMax || last.CPUQuota != 2 {
		t.Errorf("cgroup limits %+v", last)
	}
	if got := td.status(t, "vm1"); got != api.StatusRunning {
		t.Errorf("status %s", got)
	}
	if r := td.render(td.insts.get("vm1")); r.Type != api.InstanceVM || r.PID != v.pid {
		t.Errorf("rendered %+v", r)
	}
	if a, _ := td.fnet.isAttached("vm1"); !a || td.fnet.count("AttachTap vm1") != 1 || td.fnet.count("Attach vm1") != 0 {
		t.Error("not attached through a tap")
	}

	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop}); err != nil {
		t.Fatal(err)
	}
	if td.fvm.count("system_powerdown vm1") != 1 {
		t.Error("stop did not press the power button")
	}
	td.checkVMStopped(t, "vm1")
}

// checkVMStopped: stopped, and nothing of the run left.
func (td *testDaemon) checkVMStopped(t *testing.T, name string) {
	t.Helper()
	if got := td.status(t, name); got != api.StatusStopped {
		t.Errorf("status %s, want stopped", got)
	}
	if rec, _ := td.storedInstance(t, name); rec.State != state.StateStopped {
		t.Errorf("stored state %s", rec.State)
	}
	if a, _ := td.fnet.isAttached(name); a {
		t.Error("tap still attached")
	}
	if cg := td.cgroup(name); !cg.destroyed {
		t.Error("cgroup not removed")
	}
	if _, err := os.Stat(td.cfg.vmRunDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run directory left: %v", err)
	}
	if td.fvm.vm(name) != nil {
		t.Error("qemu still runs")
	}
}

// TestVMStopIgnoredKills: a guest that ignores the power button is killed
// after the timeout; --force kills without asking.
func TestVMStopIgnoredKills(t *testing.T) {
	td := newTestDaemon(t)
	td.fvm.ignoreACPI = true
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	for _, force := range []bool{false, true} {
		if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
			t.Fatal(err)
		}
		if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop, Timeout: 1, Force: force}); err != nil {
			t.Fatal(err)
		}
		td.checkVMStopped(t, "vm1")
	}
	if n := td.fvm.count("system_powerdown vm1"); n != 1 {
		t.Errorf("power button pressed %d times, want once (not with --force)", n)
	}
}

// TestVMGuestPowerOff: QEMU ending by itself (the guest powered off) is
// cleaned up like a container's exit.
func TestVMGuestPowerOff(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	td.fvm.vm("vm1").end()
	deadline := time.Now().Add(waitBound)
	// The listed status turns stopped before the record is written.
	for time.Now().Before(deadline) {
		if rec, _ := td.storedInstance(t, "vm1"); td.status(t, "vm1") == api.StatusStopped && rec.State == state.StateStopped {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	td.checkVMStopped(t, "vm1")
	if rec, _ := td.storedInstance(t, "vm1"); rec.LastExit == nil || rec.LastExit.Status != -1 {
		t.Errorf("last exit %+v, want the unknown status", rec.LastExit)
	}
}

// TestVMReconcile: a restarted daemon adopts a VM whose QEMU still runs
// (also one whose start it had not committed) and settles one whose QEMU
// is gone as stopped.
func TestVMReconcile(t *testing.T) {
	td := newTestDaemon(t)
	for _, n := range []string{"vm1", "vm2"} {
		td.addInstance(t, n, state.StateStopped, vmRecord)
		if err := changeState(t, td, n, api.InstanceStatePut{Action: api.ActionStart}); err != nil {
			t.Fatal(err)
		}
	}
	td.addInstance(t, "vm3", state.StateStopped, vmRecord) // a start not committed
	if _, err := td.fvm.Start(context.Background(), qemu.Config{Name: "vm3", RunDir: td.cfg.vmRunDir("vm3")}); err != nil {
		t.Fatal(err)
	}
	pid1 := td.fvm.vm("vm1").pid
	next := td.restart(t)
	next.fvm.vm("vm2").end() // gone while the daemon was down
	next.startDaemon(t)

	if got := next.status(t, "vm1"); got != api.StatusRunning {
		t.Errorf("vm1 %s, want running (adopted)", got)
	}
	if r := next.render(next.insts.get("vm1")); r.PID != pid1 {
		t.Errorf("vm1 pid %d, want %d", r.PID, pid1)
	}
	if rec, _ := next.storedInstance(t, "vm3"); rec.State != state.StateRunning || next.status(t, "vm3") != api.StatusRunning {
		t.Errorf("vm3 %s, want running (adopted)", rec.State)
	}
	next.checkVMStopped(t, "vm2")
	// The adopted VM stops as any.
	if err := changeState(t, next, "vm1", api.InstanceStatePut{Action: api.ActionStop}); err != nil {
		t.Fatal(err)
	}
	next.checkVMStopped(t, "vm1")
}

// TestVMUpdateRunning: a running VM's disk limits change through QEMU; its
// vCPUs and memory do not change while it runs.
func TestVMUpdateRunning(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	if err := updateVM(t, td, "vm1", map[string]string{KeyDiskReadOps: "100iops"}); err != nil {
		t.Fatal(err)
	}
	if th := td.fvm.vm("vm1").throttle; th == nil || th.IOPSRd != 100 {
		t.Errorf("throttle %+v", th)
	}
	if err := updateVM(t, td, "vm1", map[string]string{KeyMemory: "2GiB"}); !errors.Is(err, ErrConflict) {
		t.Errorf("memory of a running VM: %v, want ErrConflict", err)
	}
	if rec, _ := td.storedInstance(t, "vm1"); rec.Config[KeyMemory] != "" || rec.Config[KeyDiskReadOps] != "100iops" {
		t.Errorf("stored config %v", rec.Config)
	}
}

func updateVM(t *testing.T, td *testDaemon, name string, patch map[string]string) error {
	t.Helper()
	op, err := td.UpdateInstance(context.Background(), name, api.InstancePatch{Config: patch})
	if err != nil {
		return err
	}
	return waitOp(t, op)
}

// TestVMRefusals: what vessel does not do for VMs is refused up front.
func TestVMRefusals(t *testing.T) {
	td := newTestDaemon(t)
	ctx := context.Background()
	if _, err := td.CreateInstance(ctx, api.InstancesPost{Name: "x", Type: "lxc", Source: api.InstanceSource{Image: "busybox"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown type: %v", err)
	}
}

// TestVMCopyLocal: a copy of a stopped VM (or of its snapshot) is a VM
// with the source's disk and configuration, its own address and so its
// own MAC, and its own name on the kernel command line; the source does
// not change. A running VM is not copied here.
func TestVMCopyLocal(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord, func(r *state.Instance) {
		r.Config = map[string]string{KeyMemory: "512MiB"}
	})
	td.putSnapshot(t, "vm1", "s1", "disk of vm1 at s1")
	ctx := context.Background()
	copyOf := func(src, name string) error {
		t.Helper()
		op, err := td.CreateInstance(ctx, api.InstancesPost{Name: name, Source: api.InstanceSource{Type: "copy", Source: src}, Start: true})
		if err != nil {
			return err
		}
		return waitOp(t, op)
	}
	for src, want := range map[string]string{"vm1": "vm1", "vm1/s1": "disk of vm1 at s1"} {
		name := "copy-of-" + strings.ReplaceAll(src, "/", "-")
		if err := copyOf(src, name); err != nil {
			t.Fatalf("copy %s: %v", src, err)
		}
		rec, _ := td.storedInstance(t, name)
		orig, _ := td.storedInstance(t, "vm1")
		// The snapshot's configuration (none here) for a snapshot's copy.
		if !rec.IsVM() || !rec.Running() || (src == "vm1") != (rec.Config[KeyMemory] == "512MiB") || rec.Address == orig.Address {
			t.Errorf("copy of %s: %+v (source at %s)", src, rec, orig.Address)
		}
		if got := td.readVolume(t, containerVolume(name)); got != want {
			t.Errorf("copy of %s: disk %q, want %q", src, got, want)
		}
		v := td.fvm.vm(name)
		if v == nil {
			t.Fatalf("copy of %s: no QEMU", src)
		}
		if v.cfg.Net == nil || v.cfg.Net.MAC != network.MACFor(rec.Address) || v.cfg.Net.MAC == network.MACFor(orig.Address) {
			t.Errorf("copy of %s: MAC %+v", src, v.cfg.Net)
		}
		if !strings.Contains(v.cfg.Cmdline, "vessel.hostname="+name+" ") {
			t.Errorf("copy of %s: command line %q", src, v.cfg.Cmdline)
		}
	}
	if got := td.readVolume(t, containerVolume("vm1")); got != "vm1" {
		t.Errorf("source disk %q", got)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	if err := copyOf("vm1", "vm3"); !errors.Is(err, ErrConflict) {
		t.Errorf("copy of a running VM: %v", err)
	}
}

// TestVMStopPressesAgain: a press the guest missed (it was still booting)
// is followed by another; the guest then shuts down by itself, unkilled.
func TestVMStopPressesAgain(t *testing.T) {
	td := newTestDaemon(t)
	td.fvm.acpiLost = 1
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop, Timeout: 60}); err != nil {
		t.Fatal(err)
	}
	if n := td.fvm.count("system_powerdown vm1"); n != 2 {
		t.Errorf("power button pressed %d times, want 2", n)
	}
	td.checkVMStopped(t, "vm1")
}
