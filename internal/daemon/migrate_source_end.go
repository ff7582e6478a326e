package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
)

// How a move ends on the source: the target's verdict on the restore
// (awaitResumed), then either commit (the container runs there: the
// source copy goes) or cleanup (it resumes here), or, when nobody can
// tell, a hand-off of the instance's lock to a settle operation.

// awaitResumed waits for the target's verdict on the restore (or a cold
// move's start) and returns how long the target took and how long before
// its answer the tasks resumed (0 if not told), in seconds. If the
// connection breaks meanwhile, the outcome is unknown: ask the target
// (through a new connection) whether the container runs there.
func (m *migrationSource) awaitResumed(ctx context.Context) (restore, resumedAgo float64, err error) {
	msg, err := m.sess.Expect(ctx, migration.MsgResumed)
	if err == nil {
		return msg.RestoreSeconds, msg.ResumedSeconds, nil
	}
	return 0, 0, m.askTarget(ctx, err)
}

// askTarget decides a move whose verdict was lost with err.
func (m *migrationSource) askTarget(ctx context.Context, err error) error {
	if errors.Is(err, migration.ErrRemote) || ctx.Err() != nil {
		return err // the target failed the restore and cleaned up
	}
	for range 10 {
		runsThere, qerr := m.d.runsOnTarget(context.WithoutCancel(ctx), m.journal)
		switch {
		case qerr == nil && runsThere:
			m.d.log.Warn("lost the migration connection after the restore; the container runs on the target", "name", m.name)
			return nil
		case qerr == nil:
			return err // not there: resume here
		}
		time.Sleep(time.Second)
	}
	// Unknown: never run it in two places. It stays frozen here (and cut
	// off) until the target answers; settleOutgoing keeps asking.
	m.fz.forget()
	m.linkDown, m.unsettled = false, true
	return fmt.Errorf("connection to the target lost during the restore and the target does not answer: %w", err)
}

// commit ends the move on the source: the container runs on the target
// now, so the source copy (frozen, or stopped) goes, with its journal (in
// the transaction that forgets the instance). A copy only drops the
// journal.
func (m *migrationSource) commit(ctx context.Context) error {
	m.committed = true
	m.fz.forget() // the frozen copy goes
	// The transfer snapshots go before the instance does: once it is
	// forgotten its name is free here, and a move back would make
	// passes of the same names.
	m.closeDisk()
	if !m.req.Copy {
		if err := m.sendLogs(); err != nil {
			m.d.log.Warn("console log not carried to the target", "name", m.name, "err", err)
		}
		m.d.dropMovedSource(ctx, m.inst)
	} else {
		m.d.undo("remove migration journal", m.name, m.d.state.DeleteMigration(m.name))
	}
	_ = m.sess.Send(migration.Message{Type: migration.MsgCommit})
	return nil
}

// cleanup runs at the end whatever happened: it thaws a container still
// frozen by a failed migration, lifts the network lock and drops the
// pre-copy snapshots. The journal goes unless the outcome is unknown.
func (m *migrationSource) cleanup() {
	d := m.d
	if m.unsettled {
		m.journal.PageServer = "" // aborted already
		d.undo("record the unsettled migration", m.name, m.note())
	} else if !m.committed {
		d.undo("remove migration journal", m.name, d.state.DeleteMigration(m.name))
	}
	if m.linkDown && !m.committed {
		if m.linkErr = d.net.SetHostLink(m.name, true); m.linkErr != nil {
			d.log.Error("network unlock after failed migration", "name", m.name, "err", m.linkErr)
		}
	}
	_, m.thawErr = m.fz.thaw() // logged
	m.closeDisk()
}

// handOff gives the instance's lock (release) to a settle operation when
// the move's outcome is unknown, and says whether it did.
func (m *migrationSource) handOff(release func()) bool {
	if !m.unsettled {
		return false
	}
	m.d.settleInBackground(m.inst, release, m.journal)
	return true
}

// note writes the move's journal.
func (m *migrationSource) note() error {
	if err := m.d.state.PutMigration(m.journal); err != nil {
		return fmt.Errorf("migration journal: %w", err)
	}
	return nil
}

// dropMovedSource deletes the source copy of a container that now runs on
// its target (killing the frozen original first); the caller holds its
// lock.
func (d *Daemon) dropMovedSource(ctx context.Context, inst *instance) {
	name := inst.name
	// Before the instance's CRIU logs go with it.
	d.dropMigrationDirs(name)
	if run := inst.live(); run != nil {
		if err := d.killAndWait(ctx, inst, run); err != nil {
			d.log.Warn("kill migrated container", "name", name, "err", err)
		}
		if err := d.cleanupStopped(ctx, inst, run, false); err != nil {
			d.log.Warn("cleanup migrated container", "name", name, "err", err)
		}
	}
	if err := d.deleteLocked(ctx, inst); err != nil {
		d.log.Error("delete the source copy of a moved container", "name", name, "err", err)
	}
}

// closeDisk ends the disk's sending: btrfs deletes its transfer snapshots.
func (m *migrationSource) closeDisk() {
	if m.disk != nil {
		m.d.undo("close disk sender", m.name, m.disk.Close(context.Background()))
		m.disk = nil
	}
}
