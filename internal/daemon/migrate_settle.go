package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// Settling: a migration whose outcome this host does not know (its daemon
// was killed in the middle, or the connection broke while the target
// restored) is settled from its journal (state.Migration), holding the
// instance's lock throughout, as an operation ("Settling migration"):
//
//   - a source that had not told the target to start the container resumes
//     it here (CRIU's page server lets go of it, the network lock is
//     lifted, the freezer thawed, a cold move restarts it);
//   - a source that had asks the target: it runs there, the source copy
//     goes; it is not there, it resumes here; no answer, it stays frozen
//     and asks again every journalRetry;
//   - a target deletes what it half received unless the container already
//     runs there.

// journalRetry is how often an unsettled move asks its target again.
const journalRetry = 10 * time.Second

// recoverMigrations settles the migrations a previous daemon left in
// flight. It runs after reconcile and before the API serves: each
// instance is locked (and shown "Migrating") at once, so no request slips
// in first and a peer asking about it never mistakes it for a finished
// move.
func (d *Daemon) recoverMigrations() error {
	journals, err := d.state.ListMigrations()
	if err != nil {
		return fmt.Errorf("read migration journals: %w", err)
	}
	for name, j := range journals {
		inst := d.insts.get(name)
		if inst == nil {
			d.log.Warn("dropping the journal of a migration whose instance is gone", "name", name)
			d.undo("remove migration journal", name, d.state.DeleteMigration(name))
			continue
		}
		d.log.Warn("settling a migration interrupted by a daemon restart", "name", name, "role", j.Role, "phase", j.Phase)
		release, err := d.lockInstance(d.ctx, inst, actSettle.busy())
		if err != nil {
			continue
		}
		d.settleInBackground(inst, release, j)
	}
	return nil
}

// settleInBackground settles j as an operation that already holds inst's
// lock (release gives it back when done).
func (d *Daemon) settleInBackground(inst *instance, release func(), j state.Migration) {
	if !d.enterBackground() {
		// Shutting down: the journal stays, the next start settles it.
		release()
		return
	}
	inst.setBusy(actSettle.busy())
	d.ops.Start(d.ctx, "Settling migration", instanceResources(inst.name), func(ctx context.Context, op *operations.Operation) error {
		defer d.bg.Done()
		defer release()
		op.SetMetadata(map[string]any{"role": j.Role, "phase": j.Phase, "peer": j.Peer})
		if j.Role == state.MigrationTarget {
			return d.settleIncoming(ctx, inst, j)
		}
		return d.settleOutgoing(ctx, inst, j)
	})
}

// settleIncoming ends a reception cut by a crash of this daemon: a
// container that runs here stays; anything else received is deleted.
func (d *Daemon) settleIncoming(ctx context.Context, inst *instance, j state.Migration) error {
	name := inst.name
	d.dropMigrationDirs(name)
	if run := inst.live(); run != nil && isVM(inst) {
		// A VM's journal goes with its running state: this QEMU still
		// waited for the migration (reconcile adopted it). It goes.
		if err := d.killAndWait(ctx, inst, run); err != nil {
			d.log.Error("kill a half-received VM", "name", name, "err", err)
		}
		d.undo("cleanup a half-received VM", name, d.cleanupStopped(ctx, inst, run, false))
	}
	if inst.live() != nil {
		d.log.Warn("incoming migration was interrupted after the container started here: keeping it", "name", name, "source", j.Peer)
		return d.state.DeleteMigration(name)
	}
	// What the restore held of the volume goes before it (reconcile
	// did it already; a mount left on a deleted volume would make the
	// next move's bind fail with ENOENT).
	d.undo("unmount a restore's root", name, d.rt.ReleaseRestoreRoot(name))
	d.undo("unmount the rootfs and sysfs", name, d.releaseUserns(name))
	d.dropTransfers(ctx, name)
	if err := d.deleteLocked(ctx, inst); err != nil {
		d.log.Error("delete a half-received instance", "name", name, "err", err)
		return err
	}
	d.log.Info("deleted a half-received instance (its source keeps it)", "name", name, "source", j.Peer)
	return nil
}

// settleOutgoing ends a move cut by a crash of this daemon or by a lost
// connection, retrying until the outcome is known (or the daemon stops:
// the journal stays for the next start).
func (d *Daemon) settleOutgoing(ctx context.Context, inst *instance, j state.Migration) error {
	name := inst.name
	if j.PageServer != "" {
		d.releaseLazyDump(name, j.PageServer)
	}
	runsThere := false
	for j.Phase == state.PhaseRestoring && !j.Copy {
		var err error
		if runsThere, err = d.runsOnTarget(ctx, j); err == nil {
			break
		}
		d.log.Error("interrupted move: cannot tell whether the container runs on the target; it stays FROZEN here until the target answers",
			"name", name, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("settling %s: %w", name, ctx.Err())
		case <-time.After(journalRetry):
		}
	}
	if runsThere {
		d.log.Warn("interrupted move: the container runs on the target; removing the source copy", "name", name)
		d.dropMovedSource(ctx, inst)
	} else {
		d.resumeSource(ctx, inst, j)
		d.log.Info("interrupted move: the container resumed on this host", "name", name)
	}
	d.dropTransfers(ctx, name)
	d.dropMigrationDirs(name)
	if err := d.state.DeleteMigration(name); err != nil {
		return fmt.Errorf("remove the journal of %s: %w", name, err)
	}
	return nil
}

// runsOnTarget asks a move's target whether the instance is settled there.
// An error means no answer yet (unreachable, or still receiving).
func (d *Daemon) runsOnTarget(ctx context.Context, j state.Migration) (bool, error) {
	peer, err := d.peerByFingerprint(j.Peer)
	if err != nil {
		return false, err
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	inst, err := d.peerAPIFor(peer).Instance(qctx, j.Name)
	switch {
	case client.StatusCode(err) == 404:
		return false, nil
	case err != nil:
		return false, err
	case inst.Status == api.StatusRunning, inst.Status == api.StatusStopped:
		// The target shows a received instance "Migrating" until its
		// restore is done (or it deleted it: 404), so Stopped means the
		// move completed: a stopped container's, or one that ran there
		// and stopped since. Either way it is the target's now.
		return true, nil
	}
	return false, fmt.Errorf("the target shows %s as %s", j.Name, inst.Status)
}

// resumeSource puts the source container back as it was before the move.
func (d *Daemon) resumeSource(ctx context.Context, inst *instance, j state.Migration) {
	name := inst.name
	if inst.live() != nil && isVM(inst) {
		d.resumeVM(ctx, name) // migrate_vm_source.go
		return
	}
	if inst.live() != nil {
		if err := d.net.SetHostLink(name, true); err != nil {
			d.log.Error("network unlock after an interrupted move", "name", name, "err", err)
		}
		d.thawLeftover(name)
		return
	}
	if j.WasRunning {
		if err := d.startLocked(ctx, inst); err != nil {
			d.log.Error("restart after an interrupted cold move", "name", name, "err", err)
		}
	}
}

// releaseLazyDump ends a lazy dump's page server that nobody will fetch
// from and waits until CRIU has let go of the container's processes.
func (d *Daemon) releaseLazyDump(name, addr string) {
	cg, err := d.instanceCgroup(name)
	if err != nil {
		d.log.Error("release an interrupted move's page server", "name", name, "err", err)
		return
	}
	if err := runtime.ReleaseLazyDump(addr, cg.Pids); err != nil {
		d.log.Error("CRIU still holds the processes of an interrupted move", "name", name, "err", err)
	}
}

// dropTransfers deletes what interrupted disk transfers of an instance
// left in the pool (sent on the source, received on the target).
func (d *Daemon) dropTransfers(ctx context.Context, name string) {
	if err := d.storage.DropTransfers(ctx, name); err != nil {
		d.log.Warn("delete transfer leftovers", "name", name, "err", err)
	}
}

// importJournalFiles moves the journals an older vesseld kept as files
// (ROOT/migrations/NAME.json) into the state store, so a host upgraded in
// the middle of a migration still settles it.
func (d *Daemon) importJournalFiles() error {
	dir := filepath.Join(d.cfg.Root, "migrations")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var j state.Migration
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &j)
		}
		if err != nil {
			d.log.Error("unreadable migration journal file, left in place", "path", path, "err", err)
			continue
		}
		j.Instance = name
		if err := d.state.PutMigration(j); err != nil {
			return err
		}
		d.undo("remove imported journal file", name, os.Remove(path))
	}
	_ = os.Remove(dir) // only if empty
	return nil
}
