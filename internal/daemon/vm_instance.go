package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/vm"
)

// Virtual machines: an instance of type state.TypeVM runs as a QEMU
// process (vmRunner) instead of a container under a shim. The rest of the
// instance model is shared: the record, the lock and transitions, the
// address, the console log, the cgroup, the volume (a container volume
// holding vm.DiskFile, cloned from the image's vm-image volume). The
// differences, one function each here, are called where the container
// path would act:
//
//   - start (startVM): a filtered tap on the bridge, the cgroup with the
//     VM's limits, QEMU started paused and detached, moved into the
//     cgroup, its disk throttled (QMP), then let run;
//   - stop (askVMStop): the ACPI power button; kill: QEMU's pidfd;
//   - the runtime state to release: the run directory (sockets, pidfile);
//   - reconcile: a QEMU found by its pidfile is adopted;
//   - a guest's reboot (a reset QEMU survives) ends its agent session
//     (vm_events.go); the console attaches to QEMU's serial socket
//     (vm_console.go).

// Defaults and the host-side cost of a VM.
const (
	// DefaultVMMemory is a VM's RAM when limits.memory does not say.
	DefaultVMMemory = 1 << 30
	// vmMemoryOverhead is what QEMU itself needs beyond the guest's RAM
	// (devices, its own heap, TCG's translation cache: qemu.TCGCacheMiB),
	// charged to the VM's cgroup with the RAM.
	vmMemoryOverhead = 256<<20 + qemu.TCGCacheMiB<<20
	// vmPidsMax bounds QEMU's threads (vCPUs, I/O workers).
	vmPidsMax = 1024
)

// vmSizing is what a VM's configuration makes of QEMU and its cgroup.
type vmSizing struct {
	CPUs      int
	MemoryMiB int
	// Cgroup is the configuration the QEMU process's cgroup gets: the CPU
	// quota and weight as set, the guest's RAM plus QEMU's overhead, a
	// thread cap, the disk weight; the disk limits go to QEMU instead.
	Cgroup   map[string]string
	Throttle *qemu.IOThrottle
}

// sizeVM reads a VM's limits: limits.cpu (whole vCPUs, rounded up; the
// quota stays fractional), limits.memory (the guest's RAM, default
// DefaultVMMemory), limits.disk.* as QEMU's throttling of the VM's disk.
func sizeVM(name string, cfg map[string]string) (vmSizing, error) {
	p := configParser{cfg: cfg}
	cores := p.cores(KeyCPU)
	mem := p.number(KeyMemory, parseSize)
	t := qemu.IOThrottle{
		ID:     qemu.RootDiskID,
		BPSRd:  p.number(KeyDiskRead, parseRate),
		BPSWr:  p.number(KeyDiskWrite, parseRate),
		IOPSRd: p.number(KeyDiskReadOps, parseIOPS),
		IOPSWr: p.number(KeyDiskWriteOps, parseIOPS),
		Group:  "vessel-" + name,
	}
	if p.err != nil {
		return vmSizing{}, p.err
	}
	s := vmSizing{CPUs: max(1, int(math.Ceil(cores))), MemoryMiB: int(DefaultVMMemory >> 20)}
	if mem > 0 {
		s.MemoryMiB = int((mem + 1<<20 - 1) >> 20)
	}
	s.Cgroup = maps.Clone(cfg)
	if s.Cgroup == nil {
		s.Cgroup = map[string]string{}
	}
	for _, k := range []string{KeyDiskRead, KeyDiskWrite, KeyDiskReadOps, KeyDiskWriteOps} {
		delete(s.Cgroup, k)
	}
	s.Cgroup[KeyMemory] = strconv.FormatInt(int64(s.MemoryMiB)<<20+vmMemoryOverhead+int64(s.MemoryMiB)<<20/32, 10)
	s.Cgroup[KeyProcesses] = strconv.Itoa(vmPidsMax)
	if t.BPSRd|t.BPSWr|t.IOPSRd|t.IOPSWr != 0 {
		s.Throttle = &t
	}
	return s, nil
}

// isVM says an instance is a virtual machine.
func isVM(inst *instance) bool { return inst.record().IsVM() }

// vmDisk is the path of a VM instance's disk.
func (d *Daemon) vmDisk(name string) string {
	return filepath.Join(d.storage.Path(containerVolume(name)), vm.DiskFile)
}

func vmImageVolume(fp string) storage.Volume {
	return storage.Volume{Type: storage.VolumeVMImage, Name: fp}
}

// ensureVMImageVolume makes an image's VM disk once (under the image's
// lock): a vm-image volume holding vm.DiskFile built from the image's
// unpacked volume, then read-only. VM instances are clones of it.
func (d *Daemon) ensureVMImageVolume(ctx context.Context, fp string) error {
	if err := d.ensureImageVolume(ctx, fp); err != nil {
		return err
	}
	unlock, err := d.imageLocks.Lock(ctx, fp)
	if err != nil {
		return err
	}
	defer unlock()
	vol := vmImageVolume(fp)
	if d.storage.VolumeExists(vol) {
		return nil
	}
	r := revert.New()
	defer r.Fail()
	if err := d.storage.CreateVolume(ctx, vol); err != nil {
		return fmt.Errorf("vm image volume: %w", err)
	}
	r.Add(func() { d.undo("delete vm image volume", fp, d.storage.DeleteVolume(context.WithoutCancel(ctx), vol)) })
	src := d.storage.Path(storage.Volume{Type: storage.VolumeImage, Name: fp})
	if err := d.vms.BuildDisk(ctx, src, d.storage.Path(vol)); err != nil {
		return fmt.Errorf("vm disk of image %.12s: %w", fp, err)
	}
	if err := d.storage.SetReadOnly(ctx, vol, true); err != nil {
		return err
	}
	r.Success()
	return nil
}

// startVM starts a stopped VM; the caller holds its lock.
func (d *Daemon) startVM(ctx context.Context, inst *instance) error {
	return d.launchVM(ctx, inst, nil)
}

// launchVM starts a stopped VM; with load, QEMU starts waiting for its
// state (-incoming defer) and load gives it (a stateful restore) before
// the VM runs.
func (d *Daemon) launchVM(ctx context.Context, inst *instance, load func(context.Context, vmMonitor) error) error {
	return d.launchVMWith(ctx, inst, load, nil)
}

// launchVMWith is launchVM; also runs in the transaction that records
// the VM running (a move's journal goes in it).
func (d *Daemon) launchVMWith(ctx context.Context, inst *instance, load func(context.Context, vmMonitor) error, also func(*state.Tx) error) (err error) {
	name := inst.name
	if inst.live() != nil {
		return errorf(ErrConflict, "instance %q is already running", name)
	}
	rec := inst.record()
	size, err := sizeVM(name, rec.Config)
	if err != nil {
		return err
	}
	r := revert.New()
	defer r.Fail()
	// A restore's QEMU maps the RAM file the stopped QEMU left, if the
	// restore kept it (vm_ram.go). Into fresh RAM it faults all its RAM in
	// as it loads it: without transparent huge pages unless configured
	// (internal/qemu/thp.go). Into kept RAM it faults nothing new but the
	// punched pages and keeps them: it maps the kept file's huge pages
	// with one entry each, and a KVM guest keeps their TLB reach.
	noTHP := load != nil && !d.cfg.VMRestoreTHP && !d.hasVMRAM(name)
	proc, qcfg, _, err := d.spawnVM(ctx, r, rec, size, vmSpawn{incoming: load != nil, noTHP: noTHP, keepRAM: load != nil})
	if err != nil {
		return err
	}
	mon, err := d.vms.Monitor(ctx, qcfg.QMPSocket())
	if err != nil {
		return err
	}
	defer mon.Close()
	if load != nil {
		if err := load(ctx, mon); err != nil {
			return err
		}
	}
	if size.Throttle != nil {
		if err := mon.SetIOThrottle(ctx, *size.Throttle); err != nil {
			return fmt.Errorf("disk limits of %s: %w", name, err)
		}
	}
	if err := mon.Cont(ctx); err != nil {
		return err
	}
	d.crashAt(faultStartLaunched)
	run := d.trackVM(inst, proc)
	r.Add(func() { inst.clearLive(run) })
	if err := d.setState(inst, state.StateRunning, func(tx *state.Tx, rec *state.Instance) error {
		rec.LastStart = time.Now().UTC()
		rec.NewIdentity = false // this boot empties it (vmQEMUConfig)
		if also != nil {
			return also(tx)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("record the start of %s: %w", name, err)
	}
	r.Success()
	return nil
}

// vmSpawn is how spawnVM starts a VM's QEMU.
type vmSpawn struct {
	// incoming: waiting for its state (-incoming defer); noTHP:
	// transparent huge pages off; keepRAM: on the RAM file a stateful
	// restore kept (otherwise any file left is removed first: the
	// guest's RAM starts zero).
	incoming, noTHP, keepRAM bool
}

// spawnVM makes what a VM's QEMU runs in (its tap, its cgroup with the
// limits) and starts QEMU in it, paused until its disk is throttled. r
// undoes each step.
func (d *Daemon) spawnVM(ctx context.Context, r *revert.Reverter, rec state.Instance, size vmSizing, how vmSpawn) (vmProcess, qemu.Config, network.Endpoint, error) {
	name := rec.Name
	bg := context.WithoutCancel(ctx)
	ep, err := d.net.AttachTap(ctx, name, rec.Address)
	if err != nil {
		return nil, qemu.Config{}, ep, errorf(ErrConflict, "network: %w", err)
	}
	r.Add(func() { d.undo("detach network", name, d.net.Detach(bg, name)) })
	r.Add(func() { d.destroyCgroup(name) })
	if err := d.applyLimits(ctx, name, size.Cgroup, 0); err != nil {
		return nil, qemu.Config{}, ep, fmt.Errorf("limits of %s: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Dir(d.cfg.logPath(name)), 0o700); err != nil {
		return nil, qemu.Config{}, ep, err
	}
	qcfg := d.vmQEMUConfig(rec, size, ep)
	qcfg.Incoming, qcfg.NoTHP = how.incoming, how.noTHP
	r.Add(func() { d.undo("remove vm ram file", name, d.removeVMRAM(name)) })
	if !how.keepRAM {
		if err := d.removeVMRAM(name); err != nil {
			return nil, qcfg, ep, err
		}
	}
	proc, err := d.vms.Start(ctx, qcfg)
	if err != nil {
		return nil, qcfg, ep, err
	}
	r.Add(func() {
		kctx, cancel := context.WithTimeout(bg, killGrace)
		defer cancel()
		d.undo("kill qemu", name, proc.Kill(kctx))
		d.undo("remove vm run directory", name, os.RemoveAll(qcfg.RunDir))
	})
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return nil, qcfg, ep, err
	}
	if err := cg.AddProc(proc.Pid()); err != nil {
		return nil, qcfg, ep, err
	}
	return proc, qcfg, ep, nil
}

// vmQEMUConfig is the QEMU a VM runs in (paused at its start).
func (d *Daemon) vmQEMUConfig(rec state.Instance, size vmSizing, ep network.Endpoint) qemu.Config {
	return qemu.Config{
		Name: rec.Name, Accel: d.vms.Accel().Accel, CPUs: size.CPUs, MemoryMiB: size.MemoryMiB,
		Cmdline: vm.Cmdline(vm.Boot{Hostname: rec.Name, Init: rec.Init, StopSignal: rec.StopSignal, Net: &vm.Net{
			MAC: ep.MAC, Address: ep.Address, Gateway: ep.Gateway,
		}, NewMachineID: rec.NewIdentity}),
		Disk:   qemu.Disk{Path: d.vmDisk(rec.Name)},
		Net:    &qemu.Net{Tap: ep.HostVeth, MAC: ep.MAC},
		RunDir: d.cfg.vmRunDir(rec.Name), ConsoleLog: d.cfg.logPath(rec.Name),
		RAMFile: d.cfg.vmRAMFile(rec.Name),
		Paused:  true,
	}
}

// trackVM registers a VM's QEMU and watches for its end. vessel is not
// QEMU's parent (it daemonized): its exit status is not known.
func (d *Daemon) trackVM(inst *instance, proc vmProcess) *running {
	run := &running{proc: runtime.Process{InitPid: proc.Pid()}, vm: proc, exited: make(chan struct{})}
	inst.setLive(run)
	go d.watchVMEvents(inst.name, proc)
	go func() {
		<-proc.Done()
		run.exit = runtime.Exit{Status: -1, Time: time.Now().UTC(), Err: errQEMUExit}
		close(run.exited)
		d.onExit(inst, run)
	}()
	return run
}

// errQEMUExit explains a VM's unknown exit status.
var errQEMUExit = errors.New("qemu ended (its exit status is not known to vessel)")

// vmPowerdownRepeat is how often a stop presses the power button again: a
// press while the guest boots (before its init listens) is lost.
const vmPowerdownRepeat = 5 * time.Second

// powerdownVM presses the VM's ACPI power button, again every
// vmPowerdownRepeat, until QEMU has ended or timeout has passed (then the
// caller kills it). Only ctx's end is an error.
func (d *Daemon) powerdownVM(ctx context.Context, name string, run *running, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		if err := d.askVMStop(ctx, name); err != nil {
			d.log.Warn("ACPI power button failed, killing", "name", name, "err", err)
			return nil
		}
		select {
		case <-run.exited:
			return nil
		case <-deadline:
			d.log.Info("graceful stop timed out, killing", "name", name, "timeout", timeout)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(vmPowerdownRepeat):
		}
	}
}

// askVMStop presses the VM's ACPI power button.
func (d *Daemon) askVMStop(ctx context.Context, name string) error {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mon, err := d.vms.Monitor(mctx, qemu.Config{RunDir: d.cfg.vmRunDir(name)}.QMPSocket())
	if err != nil {
		return err
	}
	defer mon.Close()
	return mon.SystemPowerdown(mctx)
}

// releaseVMRun removes a stopped VM's run directory and, unless keepRAM
// (a stateful restore's stop), its RAM file.
func (d *Daemon) releaseVMRun(name string, keepRAM bool) error {
	d.agents.drop(name)
	err := os.RemoveAll(d.cfg.vmRunDir(name))
	if !keepRAM {
		err = errors.Join(err, d.removeVMRAM(name))
	}
	return err
}

// reconcileVM settles a VM at daemon start: a QEMU found by its pidfile is
// adopted; otherwise what a run held is released and the record says
// stopped.
func (d *Daemon) reconcileVM(ctx context.Context, inst *instance) {
	name := inst.name
	proc, err := d.vms.Find(d.cfg.vmRunDir(name), name)
	if err == nil {
		d.trackVM(inst, proc)
		d.resumeLeftoverVM(ctx, name)
		if rec := inst.record(); !rec.Running() {
			d.log.Warn("adopting a VM whose start was interrupted by a daemon restart", "name", name)
			if err := d.setState(inst, state.StateRunning, func(_ *state.Tx, r *state.Instance) error {
				r.LastStart = time.Now().UTC()
				return nil
			}); err != nil {
				d.log.Error("record the adopted VM as running", "name", name, "err", err)
			}
		}
		d.log.Info("reattached running VM", "name", name, "pid", proc.Pid())
		if err := d.net.Guard(ctx, name, inst.record().Address); err != nil {
			d.log.Error("anti-spoofing filter of a running VM", "name", name, "err", err)
		}
		return
	}
	var run *running
	if inst.record().Running() {
		run = &running{exited: make(chan struct{}), exit: runtime.Exit{Status: -1, Time: time.Now().UTC()}}
		close(run.exited)
		d.log.Info("VM stopped while the daemon was down", "name", name)
	}
	if err := d.cleanupStopped(ctx, inst, run, false); err != nil {
		d.log.Warn("cleanup of a stopped VM", "name", name, "err", err)
	}
}

// updateRunningVM applies a running VM's new configuration: the CPU quota
// and weight and the disk weight in its cgroup, the disk limits through
// QEMU. Its vCPUs and RAM are QEMU's command line: a change of those is
// refused while it runs.
func (d *Daemon) updateRunningVM(ctx context.Context, inst *instance, prev, cfg map[string]string) error {
	name := inst.name
	old, err := sizeVM(name, prev)
	if err != nil {
		return err
	}
	size, err := sizeVM(name, cfg)
	if err != nil {
		return err
	}
	if size.CPUs != old.CPUs || size.MemoryMiB != old.MemoryMiB {
		return errorf(ErrConflict, "%q is a running VM: its vCPUs and memory change when it is stopped", name)
	}
	if err := d.applyLimits(ctx, name, size.Cgroup, 0); err != nil {
		return d.restoreLimits(ctx, name, old.Cgroup, err)
	}
	t := qemu.IOThrottle{ID: qemu.RootDiskID, Group: "vessel-" + name}
	if size.Throttle != nil {
		t = *size.Throttle
	}
	mon, err := d.vms.Monitor(ctx, qemu.Config{RunDir: d.cfg.vmRunDir(name)}.QMPSocket())
	if err != nil {
		return d.restoreLimits(ctx, name, old.Cgroup, err)
	}
	defer mon.Close()
	if err := mon.SetIOThrottle(ctx, t); err != nil {
		return d.restoreLimits(ctx, name, old.Cgroup, fmt.Errorf("disk limits: %w", err))
	}
	return d.save(inst, func(_ *state.Tx, rec *state.Instance) error {
		rec.Config = cfg
		return nil
	})
}
