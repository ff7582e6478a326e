package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// Snapshots of virtual machines. The disk is the VM's container volume
// (vm.DiskFile in it), snapshotted like a container's. The memory and
// device state of a stateful snapshot is one file, vmStateFile, in the
// snapshot's checkpoint volume (NODATASUM on btrfs: storage.PrepareNoDataSumDir),
// written by QEMU's mapped-ram file migration (qemu.Save: multifd
// channels, O_DIRECT, no bandwidth cap).
//
// A stateful snapshot of a running VM copies its RAM while it runs (a
// live save: QEMU rewrites what the guest dirties, in place); QEMU stops
// the vCPUs for the last pass and the device state, flushes and
// inactivates the disk, and leaves the VM in "postmigrate". The disk is
// snapshotted then, so disk and memory are of the same instant, and `cont`
// lets the VM run again (QEMU re-activates its disk). The frozen time is
// from QEMU's stop to the cont. The file is fsynced after the cont. A
// disk-only snapshot of a running VM stops its vCPUs with QMP `stop`
// (which drains and flushes the disk) for the copy alone.
//
// A stateful restore kills the VM's QEMU (keeping its RAM file:
// vm_ram.go), rolls the disk back, punches what the state file does not
// hold out of the RAM file, starts a new QEMU with -incoming defer on the
// same devices and RAM file and loads the file (qemu.Load), then lets it
// run.

// vmStateFile is the state file's name in a checkpoint volume.
const vmStateFile = "vm.state"

// faultVMSaved is the point between a VM's live save (VM stopped in
// postmigrate, disk snapshotted) and its cont: "fail" makes the snapshot
// fail there, "crash" kills the daemon there (the next one lets the VM
// run: resumeLeftoverVM, and drops the unrecorded volumes).
const faultVMSaved = "snapshot.vm.saved"

// vmSnapshotReadyTimeout bounds the wait for a VM to run again after a
// snapshot (a cancelled migration resumes it by itself).
const vmSnapshotReadyTimeout = 30 * time.Second

// vmStatePath is the state file of a VM's stateful snapshot.
func (d *Daemon) vmStatePath(name, snap string) string {
	return filepath.Join(d.storage.Path(checkpointVolume(name, snap)), vmStateFile)
}

// vmMonitorOf connects to a running VM's QMP socket.
func (d *Daemon) vmMonitorOf(ctx context.Context, name string) (vmMonitor, error) {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return d.vms.Monitor(mctx, qemu.Config{RunDir: d.cfg.vmRunDir(name)}.QMPSocket())
}

// snapshotVMLocked takes a VM's snapshot; the caller holds its lock. On
// any failure or cancellation nothing of the snapshot is left and a VM
// that was running runs.
func (d *Daemon) snapshotVMLocked(ctx context.Context, op *operations.Operation, inst *instance, req api.SnapshotsPost) error {
	name := inst.name
	rec := inst.record()
	if _, err := d.state.GetSnapshot(name, req.Name); err == nil {
		return errorf(ErrConflict, "snapshot %q of instance %q already exists", req.Name, name)
	}
	running := inst.live() != nil
	if req.Stateful && !running {
		return errorf(ErrConflict, "instance %q is not running: a stateful snapshot saves a running VM", name)
	}
	r := revert.New()
	defer r.Fail()
	bg := context.WithoutCancel(ctx)
	snapVol, ckVol := snapshotVolume(name, req.Name), checkpointVolume(name, req.Name)
	// Volumes without a record are the remains of a daemon that died
	// mid-snapshot.
	for _, vol := range []storage.Volume{snapVol, ckVol} {
		if err := d.storage.DeleteVolume(ctx, vol); err != nil {
			return err
		}
	}
	cloneDisk := func() error {
		if err := d.storage.CloneVolume(ctx, snapVol, containerVolume(name), true); err != nil {
			return fmt.Errorf("snapshot the disk: %w", err)
		}
		r.Add(func() { d.undo("delete snapshot volume", name, d.storage.DeleteVolume(bg, snapVol)) })
		return nil
	}

	t0 := time.Now()
	snapRec := state.Snapshot{Instance: name, Name: req.Name, Created: t0.UTC(), Stateful: req.Stateful,
		Config: rec.Config, OS: rec.OS, TakenAs: name}
	meta := map[string]any{}
	switch {
	case !running:
		op.SetMetadata(map[string]any{api.MetaStage: "copy"})
		if err := cloneDisk(); err != nil {
			return err
		}
	case !req.Stateful:
		op.SetMetadata(map[string]any{api.MetaStage: "freeze"})
		frozen, err := d.whileVMStopped(ctx, name, cloneDisk)
		if err != nil {
			return err
		}
		snapRec.FrozenMs = ms(frozen)
	default:
		if err := d.storage.CreateVolume(ctx, ckVol); err != nil {
			return fmt.Errorf("create checkpoint volume: %w", err)
		}
		r.Add(func() { d.undo("remove checkpoint volume", name, d.storage.DeleteVolume(bg, ckVol)) })
		nocow, err := storage.PrepareNoDataSumDir(d.storage.Path(ckVol))
		if err != nil {
			return err
		}
		path := d.vmStatePath(name, req.Name)
		st, frozen, err := d.saveVMState(ctx, op, name, path, cloneDisk)
		if err != nil {
			return fmt.Errorf("stateful snapshot of %s: %w", name, err)
		}
		op.SetMetadata(map[string]any{api.MetaStage: "sync"})
		ts := time.Now()
		if err := qemu.SyncFile(path); err != nil {
			return fmt.Errorf("stateful snapshot of %s: %w", name, err)
		}
		snapRec.FrozenMs = ms(frozen)
		if snapRec.MemoryBytes, err = d.storage.VolumeUsage(ctx, ckVol); err != nil {
			return err
		}
		// For benchmarks: where the time went.
		meta = map[string]any{
			"save_ms":     ms(st.Migrate),
			"downtime_ms": ms(st.Downtime),
			"sync_ms":     ms(time.Since(ts)),
			"ram_bytes":   st.Bytes,
			"file_bytes":  st.FileBytes,
			"passes":      st.Passes,
			"forced_stop": st.ForcedStop,
			"nodatasum":   nocow,
			"memory":      "live",
		}
	}
	var err error
	if snapRec.DiskBytes, err = d.storage.VolumeUsage(ctx, snapVol); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.state.CreateSnapshot(snapRec); err != nil {
		return err
	}
	r.Success()
	meta[api.MetaStage], meta[api.MetaSnapshot], meta[api.MetaFrozenMs] = "done", req.Name, snapRec.FrozenMs
	op.SetMetadata(meta)
	return nil
}

// whileVMStopped runs fn with the VM's vCPUs stopped (QMP stop: QEMU
// drains and flushes the disk first) and returns how long they were. The
// VM runs again whatever happens.
func (d *Daemon) whileVMStopped(ctx context.Context, name string, fn func() error) (time.Duration, error) {
	mon, err := d.vmMonitorOf(ctx, name)
	if err != nil {
		return 0, err
	}
	defer mon.Close()
	t0 := time.Now()
	if err := mon.Stop(ctx); err != nil {
		return 0, errors.Join(err, d.contVM(mon))
	}
	ferr := fn()
	rerr := d.contVM(mon)
	return time.Since(t0), errors.Join(ferr, rerr)
}

// saveVMState saves a running VM's state to path with a live save and
// takes the disk (snapshot) while QEMU holds it stopped at the end, then
// lets it run. It returns the save's figures and how long the vCPUs were
// stopped. On any error the VM runs again (path is the caller's to
// remove).
func (d *Daemon) saveVMState(ctx context.Context, op *operations.Operation, name, path string, snapshot func() error) (qemu.SaveStats, time.Duration, error) {
	mon, err := d.vmMonitorOf(ctx, name)
	if err != nil {
		return qemu.SaveStats{}, 0, err
	}
	defer mon.Close()
	op.SetMetadata(map[string]any{api.MetaStage: "memory"})
	p := startProgress(op, map[string]any{api.MetaStage: "memory"}, nil)
	var done int64
	st, err := qemu.Save(ctx, mon, path, qemu.SaveOptions{Live: true, NoSync: true,
		Progress: func(n, _ int64) {
			p.bytes.Add(n - done)
			done = n
		}})
	p.end()
	if err == nil {
		op.SetMetadata(map[string]any{api.MetaStage: "freeze"})
		err = snapshot()
	}
	if err == nil {
		d.crashAt(faultVMSaved)
		if d.fault(faultVMSaved) == "fail" {
			err = injected(faultVMSaved)
		}
	}
	rerr := d.contVM(mon)
	var frozen time.Duration
	if !st.Stopped.IsZero() {
		frozen = time.Since(st.Stopped)
	}
	return st, frozen, errors.Join(err, rerr)
}

// contVM makes a VM run again after a snapshot: `cont` from
// "postmigrate" (a completed save) or "paused" (a stop); a failed or
// cancelled migration resumes it by itself, once QEMU has left its
// completion states.
func (d *Daemon) contVM(mon vmMonitor) error {
	ctx, cancel := context.WithTimeout(d.ctx, vmSnapshotReadyTimeout)
	defer cancel()
	for {
		s, err := mon.QueryStatus(ctx)
		if err != nil {
			return fmt.Errorf("resume the vm: %w", err)
		}
		switch s.Status {
		case "running":
			return nil
		case "paused", "postmigrate":
			if err := mon.Cont(ctx); err != nil {
				return fmt.Errorf("resume the vm: %w", err)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("resume the vm: still %q: %w", s.Status, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// resumeLeftoverVM lets a VM run that a daemon which died in a snapshot's
// stopped window left stopped ("postmigrate" after a save, "paused" after
// a disk-only stop): vessel holds a VM stopped only inside a snapshot.
// A VM still starting ("prelaunch") is left alone.
func (d *Daemon) resumeLeftoverVM(ctx context.Context, name string) {
	mon, err := d.vmMonitorOf(ctx, name)
	if err != nil {
		d.log.Warn("qmp at reattach", "name", name, "err", err)
		return
	}
	defer mon.Close()
	s, err := mon.QueryStatus(ctx)
	if err != nil || (s.Status != "postmigrate" && s.Status != "paused") {
		return
	}
	d.log.Warn("resuming a VM a snapshot left stopped (the daemon died in it)", "name", name, "status", s.Status)
	if err := d.contVM(mon); err != nil {
		d.log.Error("resume at reattach", "name", name, "err", err)
	}
}

// restoreVMStateful brings a VM back as its stateful snapshot saved it:
// the caller has stopped it and rolled its disk back; this starts QEMU
// waiting for its state, loads the snapshot's state file and lets it run.
func (d *Daemon) restoreVMStateful(ctx context.Context, op *operations.Operation, inst *instance, snap string) error {
	op.SetMetadata(map[string]any{api.MetaStage: "restore"})
	t0 := time.Now()
	path := d.vmStatePath(inst.name, snap)
	ram := d.prepareVMRAM(inst.name, path)
	var st qemu.SaveStats
	load := func(ctx context.Context, mon vmMonitor) error {
		var err error
		st, err = qemu.Load(ctx, mon, path, qemu.SaveOptions{})
		if err != nil {
			return fmt.Errorf("stateful restore of %s: %w", inst.name, err)
		}
		return nil
	}
	if err := d.launchVM(ctx, inst, load); err != nil {
		return err
	}
	// load_ms counts the RAM file's preparation too.
	op.SetMetadata(map[string]any{api.MetaStage: "done", "restore_ms": ms(time.Since(t0)),
		"load_ms": ms(ram.Took + st.Prealloc + st.Migrate), "prealloc_ms": ms(st.Prealloc), "file_bytes": st.FileBytes,
		"ram_kept_bytes": ram.Kept, "ram_punched_bytes": ram.Punched, "ram_prepare_ms": ms(ram.Took)})
	return nil
}

// checkVMRestore refuses, before anything is stopped, a stateful restore
// QEMU could not load: the state holds the vCPUs and RAM of the
// configuration the snapshot was taken with.
func checkVMRestore(inst *instance, snap state.Snapshot) error {
	now, err := sizeVM(inst.name, inst.record().Config)
	if err != nil {
		return err
	}
	then, err := sizeVM(inst.name, snap.Config)
	if err != nil {
		return err
	}
	if now.CPUs != then.CPUs || now.MemoryMiB != then.MemoryMiB {
		return errorf(ErrConflict, "snapshot %q of %q was taken with %d vCPUs and %d MiB, the VM has %d and %d now: set limits.cpu and limits.memory back to restore its memory",
			snap.Name, inst.name, then.CPUs, then.MemoryMiB, now.CPUs, now.MemoryMiB)
	}
	return nil
}
