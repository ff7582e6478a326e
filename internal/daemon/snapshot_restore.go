package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// RestoreSnapshot validates a restore request and runs it as an operation.
// The disk is always rolled back; Stateful also brings the processes back
// as they were (the snapshot must be stateful). A running instance is
// refused unless Force is set (then it is stopped first). After a
// disk-only restore, an instance that was running is started again.
func (d *Daemon) RestoreSnapshot(ctx context.Context, name, snap string, req api.SnapshotRestorePost) (*operations.Operation, error) {
	rec, err := d.getSnapshotRecord(name, snap)
	if err != nil {
		return nil, err
	}
	if req.Stateful && !rec.Stateful {
		return nil, errorf(ErrInvalid, "snapshot %q of instance %q holds no memory state: restore it without --stateful", snap, name)
	}
	act := actRestore
	if req.Stateful {
		act = actStatefulRestore
	}
	inst, err := d.checkNow(name, act, req.Force)
	if err != nil {
		return nil, err
	}
	if req.Stateful && isVM(inst) {
		if err := checkVMRestore(inst, rec); err != nil {
			return nil, err
		}
	}
	return d.ops.Start(d.ctx, "Restoring snapshot", snapshotResources(name, snap), func(ctx context.Context, op *operations.Operation) error {
		inst, release, err := d.lock(ctx, name, act, req.Force)
		if err != nil {
			return err
		}
		defer release()
		return d.restoreLocked(ctx, op, inst, snap, req)
	}), nil
}

func (d *Daemon) restoreLocked(ctx context.Context, op *operations.Operation, inst *instance, snap string, req api.SnapshotRestorePost) (err error) {
	name := inst.name
	if _, err := d.getSnapshotRecord(name, snap); err != nil {
		return err
	}
	wasRunning := inst.live() != nil
	if wasRunning {
		op.SetMetadata(map[string]any{api.MetaStage: "stop"})
		// A VM's stateful restore keeps its RAM file (and cgroup) for
		// the new QEMU (vm_ram.go); if it fails before that QEMU runs,
		// they go as a stop's would.
		keepRAM := req.Stateful && isVM(inst)
		t := time.Now()
		if err := d.stopLockedWith(ctx, inst, true, 0, keepRAM); err != nil {
			return err
		}
		d.log.Debug("snapshot restore: stopped", "name", name, "took", time.Since(t))
		if keepRAM {
			defer func() {
				if err != nil && inst.live() == nil {
					d.undo("remove vm ram file", name, d.removeVMRAM(name))
					d.destroyCgroup(name)
				}
			}()
		}
	}
	op.SetMetadata(map[string]any{api.MetaStage: "disk"})
	if req.Stateful && !isVM(inst) {
		return d.restoreStateful(ctx, op, inst, snap)
	}
	if err := d.rollbackDisk(ctx, inst, snap); err != nil {
		return err
	}
	switch {
	case req.Stateful: // a VM's (a container's returned above)
		return d.restoreVMStateful(ctx, op, inst, snap)
	case wasRunning:
		op.SetMetadata(map[string]any{api.MetaStage: "start"})
		return d.startLocked(ctx, inst)
	}
	return nil
}

// rollbackDisk replaces the container's volume by a writable clone of the
// snapshot, with the instance's own identity if the snapshot holds
// another's (restoreIdentity). The record says so (RollingBack) from
// before the old volume goes until the new one is in place: a daemon that
// dies in between finds it at its next start and does it again
// (reconcile). The snapshot itself is untouched, so a failure here can be
// retried.
func (d *Daemon) rollbackDisk(ctx context.Context, inst *instance, snap string) error {
	srec, err := d.state.GetSnapshot(inst.name, snap)
	if err != nil {
		return err
	}
	vm := inst.record().IsVM()
	mark := func(s string) error {
		return d.save(inst, func(_ *state.Tx, rec *state.Instance) error {
			rec.RollingBack = s
			if s == "" && restoreIdentity(srec, inst.name, vm) == identityNewBoot {
				rec.NewIdentity = true
			}
			return nil
		})
	}
	if err := mark(snap); err != nil {
		return err
	}
	vol := containerVolume(inst.name)
	if err := d.storage.DeleteVolume(ctx, vol); err != nil {
		return fmt.Errorf("remove the current disk: %w", err)
	}
	d.crashAt(faultRollbackDeleted)
	if err := d.storage.CloneVolume(ctx, vol, snapshotVolume(inst.name, snap), false); err != nil {
		return fmt.Errorf("restore the disk from snapshot %q (retry the restore): %w", snap, err)
	}
	switch restoreIdentity(srec, inst.name, vm) {
	case identityRewrite:
		if err := writeIdentity(d.storage.Path(vol), inst.name); err != nil {
			return fmt.Errorf("snapshot %q: %w", snap, err)
		}
	case identityRename:
		if err := writeName(d.storage.Path(vol), inst.name); err != nil {
			return fmt.Errorf("snapshot %q: %w", snap, err)
		}
	}
	return mark("")
}

// What a restore does to the instance's identity (restoreIdentity).
type identityAction int

const (
	// identityKeep: the snapshot is the instance's own; its files and
	// machine ID are the instance's, kept as they were.
	identityKeep identityAction = iota
	// identityRewrite: a container's restored root gets the instance's
	// hostname and hosts file and an empty machine ID (writeIdentity, as
	// a copy's root does), and a stateful restore the instance's name in
	// its UTS namespace (runtime.SetUTSName).
	identityRewrite
	// identityNewBoot: a VM's next boot empties the guest's machine ID
	// (state.Instance.NewIdentity); its init names it at every boot.
	identityNewBoot
	// identityRename: the snapshot is the instance's own, taken under
	// another name (a move renamed it since): a container's restored
	// root gets the instance's hostname and hosts file and keeps its
	// machine ID (writeName), and a stateful restore the instance's
	// name in its UTS namespace.
	identityRename
)

// restoreIdentity decides what a restore of snapshot s does to the
// identity of the instance restoring it (name; vm: a virtual machine). A
// snapshot that holds another machine's identity (a copy's, taken in its
// source: ForeignIdentity) must not bring it back, whatever the names: a
// copy to another host may take its source's name, and a copy that moves
// on, renamed or not, keeps the mark. One of the instance's own brings
// back its own machine ID; only its name may be out of date, where a
// move renamed the instance after the snapshot was taken (TakenAs; a
// record from before TakenAs, "", is taken to be under the current
// name). A VM's name is not on its disk: its init takes it from the
// kernel command line at each boot.
func restoreIdentity(s state.Snapshot, name string, vm bool) identityAction {
	switch {
	case s.ForeignIdentity && vm:
		return identityNewBoot
	case s.ForeignIdentity:
		return identityRewrite
	case !vm && s.TakenAs != "" && s.TakenAs != name:
		return identityRename
	default:
		return identityKeep
	}
}

// restoreStateful rolls a stopped container's disk back to snapshot snap
// and restores its processes. The restore is prepared beside the
// rollback, which it does not need (prepareSnapshotRestore: the network,
// the cgroups, the bundle, the images' identity, the shim and `criu
// swrk`; a move's target prepares the same way before the source
// freezes), and the rest waits for the disk: the idmapped root, CRIU's
// bind of it, the request. restore_ms is counted from the disk rolled
// back, as before the overlap; prepare_ms and disk_ms are the two sides.
func (d *Daemon) restoreStateful(ctx context.Context, op *operations.Operation, inst *instance, snap string) error {
	// A new id map is recorded here, not beside the rollback's own
	// record writes (each rewrites the whole record).
	if _, err := d.ensureIDMap(inst); err != nil {
		return err
	}
	t0 := time.Now()
	type rolledBack struct {
		err error
		at  time.Time
	}
	disk := make(chan rolledBack, 1)
	go func() {
		err := d.rollbackDisk(ctx, inst, snap)
		disk <- rolledBack{err, time.Now()}
	}()
	p, rst, perr := d.prepareSnapshotRestore(ctx, inst, snap)
	prepTook := time.Since(t0)
	rb := <-disk
	d.log.Debug("snapshot restore: prepared beside the rollback", "name", inst.name,
		"disk", rb.at.Sub(t0), "prepare", prepTook)
	if err := errors.Join(rb.err, perr); err != nil {
		if perr == nil {
			p.abort()
		}
		return err
	}
	op.SetMetadata(map[string]any{api.MetaStage: "restore"})
	err := d.launchPrepared(ctx, p, func(string, string) (runtime.Process, error) { return rst.Run(ctx) }, nil)
	if err != nil {
		return err
	}
	op.SetMetadata(map[string]any{api.MetaStage: "done", "restore_ms": ms(time.Since(rb.at)),
		"disk_ms": ms(rb.at.Sub(t0)), "prepare_ms": ms(prepTook), "io": d.cfg.SnapshotIO})
	return nil
}

// prepareSnapshotRestore prepares the stateful restore of snapshot snap
// into a stopped container whose disk may still be rolling back: the
// images' identity made the instance's, prepareRun and
// prepareDirectRestore. CRIU reads the page files itself, with O_DIRECT
// where it can (DirectRead, CRIU patch 0021: the images are on disk, not
// in the page cache). vessel used to read them ahead of it through the
// page cache (FADV_WILLNEED in 10 MiB windows), but on this 2-core host
// that was 15-20 % slower than CRIU alone in every bench/snapshot run
// (the two compete for the CPU that checksums and copies the pages), so
// it is gone. A failure leaves nothing prepared.
func (d *Daemon) prepareSnapshotRestore(ctx context.Context, inst *instance, snap string) (_ *prepared, _ runtime.Restorer, err error) {
	name := inst.name
	t0 := time.Now()
	images, idmap, err := d.restoreImages(name, snap)
	if err != nil {
		return nil, nil, err
	}
	work := d.cfg.restoreWorkDir(name)
	if err := os.RemoveAll(work); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	p, err := d.prepareRun(ctx, inst, false)
	if err != nil {
		return nil, nil, err
	}
	t2 := time.Now()
	rst, err := d.prepareDirectRestore(ctx, p, runtime.RestoreOptions{
		ImagePath: images, WorkPath: work, DirectRead: true, IDMap: idmap,
	})
	if err != nil {
		p.abort()
		return nil, nil, err
	}
	d.log.Debug("snapshot restore: prepared", "name", name, "images", t1.Sub(t0), "run", t2.Sub(t1), "criu", time.Since(t2))
	return p, rst, nil
}

// restoreImages readies snapshot snap's images for a restore into name
// and returns their directory and the id map the restore runs with: the
// images' user namespace made the instance's (runtime.MapUserns), and a
// copy's snapshot's UTS namespace, or that of a snapshot taken under
// another name, named after it (runtime.SetUTSName; restoreIdentity).
func (d *Daemon) restoreImages(name, snap string) (string, *runtime.IDMap, error) {
	images := d.storage.Path(checkpointVolume(name, snap))
	srec, err := d.state.GetSnapshot(name, snap)
	if err != nil {
		return "", nil, err
	}
	if a := restoreIdentity(srec, name, false); a == identityRewrite || a == identityRename {
		// A copy's snapshot, or one taken before a move renamed the
		// instance: its UTS namespace has the other name.
		if err := runtime.SetUTSName(images, name); err != nil {
			return "", nil, fmt.Errorf("snapshot %q: %w", snap, err)
		}
	}
	idmap := d.snapshotIDMap(name)
	if idmap != nil {
		// A copy's snapshot, or one that moved cold, was taken under
		// another id block than the instance runs with now.
		if err := runtime.MapUserns(images, *idmap); err != nil {
			return "", nil, fmt.Errorf("snapshot %q: %w", snap, err)
		}
	}
	return images, idmap, nil
}

// restoreWorkDir and dumpWorkDir are where CRIU writes restore.log and
// dump.log for an instance (kept until the next restore or dump).
func (c *Config) restoreWorkDir(name string) string {
	return filepath.Join(c.RunDir, "criu", name, "restore")
}

func (c *Config) dumpWorkDir(name string) string {
	return filepath.Join(c.RunDir, "criu", name, "dump")
}

// snapshotIDMap is the id map a stateful restore of name runs with.
func (d *Daemon) snapshotIDMap(name string) *runtime.IDMap {
	if inst := d.insts.get(name); inst != nil {
		return runIDMap(inst.record())
	}
	return nil
}
