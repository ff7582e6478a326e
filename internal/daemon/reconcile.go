package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// Reconcile: at start the daemon compares each instance's record with what
// the runtime runs and what the storage pool holds, and settles the
// difference, so that a daemon killed at any point of any action leaves
// nothing half done:
//
//   - a record still "creating": the create was interrupted; everything it
//     made goes, the record last (the client's operation failed);
//   - a record "rolling back" to a snapshot: the disk is replaced again;
//   - processes the runtime runs (or has paused): adopted, whatever the
//     record says (a daemon that died between launching them and
//     committing the start left "stopped"), with the limits and the port's
//     anti-spoofing filter written again;
//     a container left frozen is thawed unless a migration journal says
//     the move that froze it must settle first (recoverMigrations);
//   - no processes: whatever a run held (runtime state, netns, cgroup) is
//     released and the record says stopped; one that said running keeps
//     the exit the shim recorded;
//   - a record whose container volume is gone (and that no migration
//     journal explains): the instance is deleted, snapshots and all;
//   - a volume in the pool no record explains (a container, snapshot or
//     checkpoint volume of no instance or snapshot record, an image volume
//     of no image): deleted.
//
// Each of the last two is a warning: logged, and listed in the host's
// info (`vessel info`) until the daemon restarts. Migrations in flight
// are settled afterwards from their journals (migrate_settle.go).
func (d *Daemon) reconcile(ctx context.Context) {
	journals, err := d.state.ListMigrations()
	if err != nil {
		d.log.Error("read migration journals", "err", err)
	}
	for _, inst := range d.insts.list() {
		j, migrating := journals[inst.name]
		release, err := d.lockInstance(ctx, inst, "")
		if err != nil {
			continue
		}
		d.reconcileInstance(ctx, inst, migrating && j.Role == state.MigrationSource)
		if !migrating {
			d.dropTransfers(ctx, inst.name)
			d.dropWithoutVolume(ctx, inst)
		}
		release()
	}
	d.dropUnrecordedVolumes(ctx, journals)
	d.dropUnusedVMRAM()
}

// warn reports something reconcile found wrong and cleaned: logged, and
// kept for the host's info. It runs only at start, before the API serves.
func (d *Daemon) warn(msg string, args ...any) {
	d.log.Warn(msg, args...)
	d.host.Warnings = append(d.host.Warnings, warningText(msg, args...))
}

// warningText renders a log message and its key-value pairs as one line:
// "msg (key value, key value)".
func warningText(msg string, args ...any) string {
	var kv []string
	for i := 0; i+1 < len(args); i += 2 {
		kv = append(kv, fmt.Sprintf("%v %v", args[i], args[i+1]))
	}
	if len(kv) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(kv, ", ") + ")"
}

// dropWithoutVolume deletes a stopped instance whose container volume is
// gone: nothing could ever start it. A record still rolling back (its
// rollback failed, the snapshot is intact) or one that runs is left
// alone, with an error logged.
func (d *Daemon) dropWithoutVolume(ctx context.Context, inst *instance) {
	rec := inst.record()
	if d.insts.get(inst.name) != inst || d.storage.VolumeExists(containerVolume(inst.name)) {
		return // undone create, or fine
	}
	if rec.RollingBack != "" || inst.live() != nil {
		d.log.Error("the instance's volume is missing from the storage pool; left as it is", "name", inst.name)
		return
	}
	if err := d.deleteLocked(ctx, inst); err != nil {
		d.log.Error("delete an instance whose volume is missing", "name", inst.name, "err", err)
		return
	}
	d.warn("deleted an instance record whose volume was missing from the storage pool", "instance", inst.name)
}

// dropUnrecordedVolumes deletes the volumes no record explains. A
// migration journal's instance is explained (recoverMigrations settles it).
func (d *Daemon) dropUnrecordedVolumes(ctx context.Context, journals map[string]state.Migration) {
	for _, typ := range []storage.VolumeType{storage.VolumeContainer, storage.VolumeSnapshot, storage.VolumeCheckpoint, storage.VolumeImage, storage.VolumeVMImage} {
		vols, err := d.storage.ListVolumes(ctx, typ)
		if err != nil {
			d.log.Error("list the storage pool's volumes", "type", typ, "err", err)
			continue
		}
		for _, vol := range vols {
			if d.volumeRecorded(vol, journals) {
				continue
			}
			if err := d.storage.DeleteVolume(ctx, vol); err != nil {
				d.log.Error("delete a volume no record explains", "volume", vol.String(), "err", err)
				continue
			}
			if vol.Type == storage.VolumeContainer {
				d.undo("drop transfers", vol.Name, d.storage.DropTransfers(ctx, vol.Name))
			}
			d.warn("deleted a volume no record explains", "volume", fmt.Sprintf("%s/%s", vol.Type, vol.Name))
		}
	}
}

// volumeRecorded reports whether a record explains vol (or one could not
// be read: nothing is deleted on a doubt). Every volume of an instance a
// migration journal names is explained: the settle decides.
func (d *Daemon) volumeRecorded(vol storage.Volume, journals map[string]state.Migration) bool {
	inst, snap, _ := strings.Cut(vol.Name, "/")
	if _, migrating := journals[inst]; migrating && vol.Type != storage.VolumeImage && vol.Type != storage.VolumeVMImage {
		return true
	}
	switch vol.Type {
	case storage.VolumeContainer:
		return d.insts.get(inst) != nil
	case storage.VolumeSnapshot, storage.VolumeCheckpoint:
		if d.insts.get(inst) == nil {
			return false
		}
		_, err := d.state.GetSnapshot(inst, snap)
		return !errors.Is(err, state.ErrNotFound)
	case storage.VolumeImage, storage.VolumeVMImage:
		_, err := d.state.GetImage(vol.Name)
		return !errors.Is(err, state.ErrNotFound)
	}
	return true
}

// reconcileInstance settles one instance (see reconcile); frozenByMove
// says a migration journal has it as its source.
func (d *Daemon) reconcileInstance(ctx context.Context, inst *instance, frozenByMove bool) {
	name := inst.name
	rec := inst.record()
	if rec.State == state.StateCreating {
		d.undoCreate(ctx, inst)
		return
	}
	if rec.RollingBack != "" {
		if err := d.rollbackDisk(ctx, inst, rec.RollingBack); err != nil {
			d.log.Error("finish a snapshot restore interrupted by a daemon restart", "name", name, "snapshot", rec.RollingBack, "err", err)
		} else {
			d.log.Warn("finished a snapshot restore interrupted by a daemon restart", "name", name, "snapshot", rec.RollingBack)
		}
	}
	if rec.IsVM() {
		d.reconcileVM(ctx, inst)
		return
	}
	status, pid, err := d.rt.State(ctx, name)
	if err != nil {
		// Neither running nor gone for sure: touching it could kill a
		// running container. It stays as it is, shown stopped until the
		// next start can tell.
		d.log.Error("cannot tell whether the container runs; leaving it alone", "name", name, "err", err)
		return
	}
	if status == runtime.StatusRunning || status == runtime.StatusPaused {
		d.adopt(ctx, inst, pid, status == runtime.StatusPaused && !frozenByMove)
		return
	}
	if status == runtime.StatusUnknown && !rec.Running() {
		// Stopped, and the runtime knows nothing of it: only a start
		// interrupted before its launch leaves something (the netns,
		// and the mounts of its volume: a restore's root bound for
		// CRIU, an idmapped rootfs).
		d.undo("unmount a restore's root", name, d.rt.ReleaseRestoreRoot(name))
		d.undo("unmount the rootfs and sysfs", name, d.releaseUserns(name))
		d.undo("detach network", name, d.net.Detach(ctx, name))
		return
	}
	// Gone while we were away: read the exit the shim recorded, and
	// release what the run held.
	var run *running
	if rec.Running() {
		run = &running{exited: make(chan struct{}), exit: runtime.Exit{Status: -1, Time: time.Now().UTC()}}
		if ch, werr := d.rt.Watch(name); werr == nil {
			select {
			case e := <-ch:
				if e.Err == nil {
					run.exit = e
				}
			case <-time.After(5 * time.Second):
			}
		}
		// Unread (a reboot cleared the shim's record, say), the exit is
		// unknown: status -1, at the time it was found out.
		close(run.exited)
		d.log.Info("container stopped while the daemon was down", "name", name)
	}
	if err := d.cleanupStopped(ctx, inst, run, false); err != nil {
		d.log.Warn("cleanup of a stopped container", "name", name, "err", err)
	}
}

// adopt watches processes a previous daemon started. A record that says
// stopped is from a daemon that died between launching them and
// committing the start: it says running now.
func (d *Daemon) adopt(ctx context.Context, inst *instance, pid int, thaw bool) {
	name := inst.name
	if _, err := d.track(inst, runtime.Process{InitPid: pid}); err != nil {
		d.log.Error("watch a running container", "name", name, "err", err)
		return
	}
	if thaw {
		// Frozen by a snapshot whose daemon died in the frozen window.
		d.thawLeftover(name)
	}
	if rec := inst.record(); !rec.Running() {
		d.log.Warn("adopting a container whose start was interrupted by a daemon restart", "name", name)
		if err := d.setState(inst, state.StateRunning, func(_ *state.Tx, r *state.Instance) error {
			r.LastStart = time.Now().UTC()
			return nil
		}); err != nil {
			d.log.Error("record the adopted container as running", "name", name, "err", err)
		}
	}
	d.log.Info("reattached running container", "name", name, "pid", pid)
	// A container started by a vessel without port filters, or whose
	// filter was flushed, gets it back; one in place is left alone.
	if err := d.net.Guard(ctx, name, inst.record().Address); err != nil {
		d.log.Error("anti-spoofing filter of a running container", "name", name, "err", err)
	}
	// Limits are in the kernel already; writing them again repairs an
	// update a crashed daemon left half done, and ends a start's boost.
	if err := d.applyLimits(ctx, name, inst.record().Config, 0); err != nil {
		d.log.Warn("re-apply limits", "name", name, "err", err)
	}
}

// undoCreate removes what an interrupted create made, then the record.
func (d *Daemon) undoCreate(ctx context.Context, inst *instance) {
	name := inst.name
	d.log.Warn("undoing a create interrupted by a daemon restart", "name", name)
	d.undo("delete runtime state", name, d.rt.Delete(ctx, name))
	d.undo("remove vm run directory", name, d.releaseVMRun(name, false))
	d.undo("unmount the rootfs and sysfs", name, d.releaseUserns(name))
	d.undo("detach network", name, d.net.Detach(ctx, name))
	d.destroyCgroup(name)
	if err := d.removeInstanceFiles(ctx, name); err != nil {
		d.log.Error("remove the files of an interrupted create; the record stays", "name", name, "err", err)
		return
	}
	d.undo("forget", name, d.forget(inst))
}

// removeInstanceFiles deletes an instance's volume, bundle, logs and CRIU
// work files.
func (d *Daemon) removeInstanceFiles(ctx context.Context, name string) error {
	if err := d.storage.DeleteVolume(ctx, containerVolume(name)); err != nil {
		return err
	}
	for _, p := range []string{d.cfg.bundleDir(name), filepath.Dir(d.cfg.logPath(name)), filepath.Dir(d.cfg.restoreWorkDir(name))} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// thawLeftover thaws a running container found frozen at daemon start.
func (d *Daemon) thawLeftover(name string) {
	cg, err := d.instanceCgroup(name)
	if err == nil {
		err = cg.Thaw()
	}
	if err != nil {
		d.log.Warn("thaw at reattach", "name", name, "err", err)
	}
}
