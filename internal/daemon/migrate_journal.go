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
	"github.com/vesselhost/vessel/internal/shim"
)

// A migration journal is a small file that says a migration of an instance
// is in flight on this host, and how far it got. A daemon that crashed (or
// was killed) in the middle of a migration finds it at its next start and
// settles the migration from it, so that the container ends up running in
// exactly one place:
//
//   - on the source, before the target was told to start the container,
//     the container resumes here (CRIU's page server lets go of it, the
//     network lock is lifted, the freezer thawed, a cold move restarts it);
//     after that, the target is asked whether the container runs there:
//     yes, the source copy goes; no, it resumes here; no answer, it stays
//     frozen and the question is asked again until the target answers;
//   - on the target, an instance that was being received and is not running
//     is deleted (its source still has it); one that runs is kept.
//
// Journals live under the state root (they outlive a reboot, as the
// records they describe do).
type migrationJournal struct {
	Role string `json:"role"` // journalSource or journalTarget
	// Peer is the other host: its fingerprint on the source (to ask it),
	// its name on the target (for the logs).
	Peer string `json:"peer"`
	// Name is the instance's name on the target (the source's may differ).
	Name  string `json:"name"`
	Live  bool   `json:"live,omitempty"`
	Copy  bool   `json:"copy,omitempty"`  // a copy: the source copy always stays
	Start bool   `json:"start,omitempty"` // the container is to run on the target
	// Phase is journalTransfer until the target is told to start the
	// container, then journalRestoring.
	Phase string `json:"phase"`
	// PageServer is the address of the lazy dump's page server, which
	// holds the container's processes until someone connects and hangs up.
	PageServer string `json:"page_server,omitempty"`
	// WasRunning: a cold move stopped the container; resuming restarts it.
	WasRunning bool      `json:"was_running,omitempty"`
	Started    time.Time `json:"started"`
}

const (
	journalSource    = "source"
	journalTarget    = "target"
	journalTransfer  = "transfer"
	journalRestoring = "restoring"
	// journalRetry is how often an unsettled move asks its target again.
	journalRetry = 10 * time.Second
)

func (c *Config) journalDir() string             { return filepath.Join(c.Root, "migrations") }
func (c *Config) journalPath(name string) string { return filepath.Join(c.journalDir(), name+".json") }

// writeJournal records j for instance name, replacing the file whole.
// durable adds an fsync: the target's journal must outlive a host crash
// (its record does); the source's changes inside the frozen window, where
// a daemon crash is the case that matters and the page cache suffices.
func (d *Daemon) writeJournal(name string, j migrationJournal, durable bool) error {
	err := os.MkdirAll(d.cfg.journalDir(), 0o700)
	if err == nil {
		err = shim.WriteJSONAtomic(d.cfg.journalPath(name), j, durable)
	}
	if err != nil {
		return fmt.Errorf("migration journal: %w", err)
	}
	return nil
}

func (d *Daemon) removeJournal(name string) {
	if err := os.Remove(d.cfg.journalPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove migration journal", "name", name, "err", err)
	}
}

func (d *Daemon) readJournal(name string) (migrationJournal, bool) {
	var j migrationJournal
	b, err := os.ReadFile(d.cfg.journalPath(name))
	if err != nil {
		return j, false
	}
	if err := json.Unmarshal(b, &j); err != nil {
		d.log.Error("unreadable migration journal", "name", name, "err", err)
		return j, false
	}
	return j, true
}

// journals lists the instances with a migration journal.
func (d *Daemon) journals() map[string]migrationJournal {
	out := map[string]migrationJournal{}
	entries, _ := os.ReadDir(d.cfg.journalDir())
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if j, ok := d.readJournal(name); ok {
			out[name] = j
		}
	}
	return out
}

// recoverMigrations settles the migrations a previous daemon left in
// flight. It runs after reattach, before the API serves; each instance is
// locked and marked busy at once (so a peer asking about it hears
// "Migrating") and settled in the background.
func (d *Daemon) recoverMigrations() {
	for name, j := range d.journals() {
		d.log.Warn("settling a migration interrupted by a daemon restart", "name", name, "role", j.Role, "phase", j.Phase)
		// Locked here, before the API serves: no request slips in first.
		unlock, err := d.lockInstance(d.ctx, name)
		if err != nil {
			continue
		}
		clear := d.setBusy(name, StatusMigrating)
		go func() {
			defer clear()
			defer unlock()
			if j.Role == journalTarget {
				d.settleIncoming(d.ctx, name, j)
			} else {
				d.settleOutgoing(d.ctx, name, j)
			}
		}()
	}
}

// settleIncoming ends a reception cut by a crash of this daemon: a
// container that runs here stays; anything else received is deleted.
func (d *Daemon) settleIncoming(ctx context.Context, name string, j migrationJournal) {
	defer d.removeJournal(name)
	d.dropMigrationDir(name)
	if d.liveOf(name) != nil {
		d.log.Warn("incoming migration was interrupted after the container started here: keeping it", "name", name, "source", j.Peer)
		return
	}
	d.dropTransferSnapshots(ctx, name)
	if _, err := d.getRecord(name); err != nil {
		return
	}
	if err := d.deleteLocked(ctx, name, false); err != nil {
		d.log.Error("delete a half-received instance", "name", name, "err", err)
		return
	}
	d.log.Info("deleted a half-received instance (its source keeps it)", "name", name, "source", j.Peer)
}

// settleOutgoing ends a move cut by a crash of this daemon (see
// migrationJournal), retrying until the outcome is known.
func (d *Daemon) settleOutgoing(ctx context.Context, name string, j migrationJournal) {
	if j.PageServer != "" {
		d.releaseLazyDump(name, j.PageServer)
	}
	runsThere := false
	for j.Phase == journalRestoring && !j.Copy {
		var err error
		if runsThere, err = d.runsOnTarget(ctx, j); err == nil {
			break
		}
		d.log.Error("interrupted move: cannot tell whether the container runs on the target; it stays FROZEN here until the target answers",
			"name", name, "err", err)
		select {
		case <-ctx.Done():
			return // the journal stays: the next start asks again
		case <-time.After(journalRetry):
		}
	}
	if runsThere {
		d.log.Warn("interrupted move: the container runs on the target; removing the source copy", "name", name)
		d.dropMovedSource(ctx, name)
	} else {
		d.resumeSource(ctx, name, j)
		d.log.Info("interrupted move: the container resumed on this host", "name", name)
	}
	d.dropTransferSnapshots(ctx, name)
	d.dropMigrationDir(name)
	d.removeJournal(name)
}

// runsOnTarget asks a move's target whether the instance is settled there.
// An error means no answer yet (unreachable, or still receiving).
func (d *Daemon) runsOnTarget(ctx context.Context, j migrationJournal) (bool, error) {
	peer, err := d.peerByFingerprint(j.Peer)
	if err != nil {
		return false, err
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	inst, err := d.peerClient(peer).Instance(qctx, j.Name)
	switch {
	case client.StatusCode(err) == 404:
		return false, nil
	case err != nil:
		return false, err
	case inst.Status == api.StatusRunning:
		return true, nil
	case inst.Status == api.StatusStopped && !j.Start:
		return true, nil // a stopped container's move, completed
	}
	return false, fmt.Errorf("the target shows %s as %s", j.Name, inst.Status)
}

// resumeSource puts the source container back as it was before the move.
func (d *Daemon) resumeSource(ctx context.Context, name string, j migrationJournal) {
	if d.liveOf(name) != nil {
		if err := d.net.SetHostLink(name, true); err != nil {
			d.log.Error("network unlock after an interrupted move", "name", name, "err", err)
		}
		d.thawLeftover(name)
		return
	}
	if j.WasRunning {
		if err := d.startLocked(ctx, name); err != nil {
			d.log.Error("restart after an interrupted cold move", "name", name, "err", err)
		}
	}
}

// releaseLazyDump ends a lazy dump's page server that nobody will fetch
// from (a connection that hangs up at once) and waits until CRIU has let go
// of the container's processes.
func (d *Daemon) releaseLazyDump(name, addr string) {
	hangUp(addr)
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pids, err := cg.Pids()
		if err != nil || !anyTraced(pids) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.log.Error("CRIU still holds the processes of an interrupted move", "name", name)
}

// anyTraced says whether a process among pids is under ptrace (CRIU's seize).
func anyTraced(pids []int) bool {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}

// dropTransferSnapshots deletes the pre-copy snapshots of an instance
// (sent on the source, received on the target).
func (d *Daemon) dropTransferSnapshots(ctx context.Context, name string) {
	for i := 0; i <= precopyMaxIterations+1; i++ {
		if err := d.storage.DeleteVolume(ctx, migrateSnapshot(name, i)); err != nil {
			d.log.Warn("delete transfer snapshot", "name", name, "pass", i, "err", err)
		}
	}
}
