package daemon

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// The settle tests start a daemon on a host where a previous daemon left a
// migration in flight (its journal in the store) and check how the
// migration ends.

// frozenSource leaves name as a live move's source leaves it once the
// container is checkpointed: running, frozen, its host link down, with
// the journal of the move in phase.
func (td *testDaemon) frozenSource(t *testing.T, name, phase string) {
	t.Helper()
	rec := td.putInstance(t, name, state.StateRunning)
	td.frt.run(name)
	td.fnet.attach(name, rec.Address, false)
	td.freeze(name)
	td.addPeer(t)
	td.putJournal(t, sourceJournal(name, phase))
}

// checkResumedHere checks that name runs here again, as before the move.
func (td *testDaemon) checkResumedHere(t *testing.T, name string) {
	t.Helper()
	inst := td.insts.get(name)
	if inst == nil || inst.live() == nil {
		t.Fatalf("%s does not run here", name)
	}
	if attached, up := td.fnet.isAttached(name); !attached || !up {
		t.Errorf("network attached %v, host link up %v; want both", attached, up)
	}
	if td.cgroup(name).frozen {
		t.Error("still frozen")
	}
	if _, ok := td.journal(t, name); ok {
		t.Error("journal left")
	}
	if rec, ok := td.storedInstance(t, name); !ok || rec.State != state.StateRunning {
		t.Errorf("record %+v (stored %v), want running", rec, ok)
	}
	if !td.storage.VolumeExists(containerVolume(name)) {
		t.Error("volume gone")
	}
	if n := td.frt.count("Kill " + name); n != 0 {
		t.Errorf("killed %d times", n)
	}
	if got := td.status(t, name); got != api.StatusRunning {
		t.Errorf("list shows %q", got)
	}
}

// TestSettleSourceBeforeStart: the target was never told to start the
// container: it resumes here, without asking the target.
func TestSettleSourceBeforeStart(t *testing.T) {
	td := newTestDaemon(t)
	td.frozenSource(t, "c1", state.PhaseTransfer)
	td.fpeer.answer(api.StatusRunning) // must not be asked

	td.startDaemon(t)
	if err := waitOp(t, td.settleOp(t)); err != nil {
		t.Fatalf("settle: %v", err)
	}

	td.checkResumedHere(t, "c1")
	if n := td.fpeer.callCount(); n != 0 {
		t.Errorf("peer asked %d times", n)
	}
}

// TestSettleSourceColdMoveRestarts: a cold move had stopped the container
// and not yet told the target to start it: it starts here again.
func TestSettleSourceColdMoveRestarts(t *testing.T) {
	td := newTestDaemon(t)
	td.putInstance(t, "c1", state.StateStopped)
	td.addPeer(t)
	td.putJournal(t, state.Migration{Instance: "c1", Role: state.MigrationSource, Peer: testPeerFP, Name: "c1",
		Start: true, WasRunning: true, Phase: state.PhaseTransfer})

	td.startDaemon(t)
	if err := waitOp(t, td.settleOp(t)); err != nil {
		t.Fatalf("settle: %v", err)
	}

	if n := td.frt.count("Start c1"); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
	td.checkResumedHere(t, "c1")
}

// TestSettleSourceAfterStart: the target had been told to start the
// container, so the target decides: running there, the source copy goes;
// not there (404), it resumes here.
func TestSettleSourceAfterStart(t *testing.T) {
	t.Run("runs on target", func(t *testing.T) {
		td := newTestDaemon(t)
		td.frozenSource(t, "c1", state.PhaseRestoring)
		td.fpeer.answer(api.StatusRunning)

		td.startDaemon(t)
		if err := waitOp(t, td.settleOp(t)); err != nil {
			t.Fatalf("settle: %v", err)
		}

		if td.insts.get("c1") != nil {
			t.Error("still registered")
		}
		if _, ok := td.storedInstance(t, "c1"); ok {
			t.Error("record left")
		}
		if _, ok := td.journal(t, "c1"); ok {
			t.Error("journal left")
		}
		if td.storage.VolumeExists(containerVolume("c1")) {
			t.Error("volume left")
		}
		if td.frt.count("Kill c1") != 1 || td.frt.count("Delete c1") != 1 || td.frt.status("c1") != runtime.StatusUnknown {
			t.Errorf("source container not killed and deleted: kills %d, deletes %d, status %q",
				td.frt.count("Kill c1"), td.frt.count("Delete c1"), td.frt.status("c1"))
		}
		if attached, _ := td.fnet.isAttached("c1"); attached {
			t.Error("network still attached")
		}
		if !td.cgroup("c1").destroyed {
			t.Error("cgroup left")
		}
		if got := td.status(t, "c1"); got != "" {
			t.Errorf("list shows %q", got)
		}
	})
	t.Run("not on target", func(t *testing.T) {
		td := newTestDaemon(t)
		td.frozenSource(t, "c1", state.PhaseRestoring)
		td.fpeer.notFound()

		td.startDaemon(t)
		if err := waitOp(t, td.settleOp(t)); err != nil {
			t.Fatalf("settle: %v", err)
		}

		td.checkResumedHere(t, "c1")
		if n := td.fpeer.callCount(); n != 1 {
			t.Errorf("peer asked %d times, want 1", n)
		}
	})
}

// TestSettleSourceWaitsForTarget: the target does not answer (yet): the
// container stays frozen and cut off, the instance locked and shown
// Migrating, while the settle asks again; once the target answers, the
// move ends. (In a synctest bubble: the retry period passes at once.)
func TestSettleSourceWaitsForTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDaemon(t)
		td.inBubble(t)
		td.frozenSource(t, "c1", state.PhaseRestoring)
		td.fpeer.fail(errPeerUnreachable)

		td.startDaemon(t)
		op := td.settleOp(t)
		for asked := 1; asked <= 3; asked++ {
			synctest.Wait() // the settle waits to ask again
			if n := td.fpeer.callCount(); n != asked {
				t.Fatalf("peer asked %d times, want %d", n, asked)
			}
			td.checkStillMigrating(t, "c1", op)
			if asked == 3 {
				td.fpeer.answer(api.StatusRunning) // at the next ask
			}
			time.Sleep(journalRetry)
		}
		synctest.Wait()
		if err := waitOp(t, op); err != nil {
			t.Fatalf("settle: %v", err)
		}
		if td.insts.get("c1") != nil || td.frt.count("Kill c1") != 1 {
			t.Error("the source copy of a container that runs on the target stays")
		}
		if _, ok := td.journal(t, "c1"); ok {
			t.Error("journal left")
		}
	})
}

// checkStillMigrating checks that an unsettled move keeps name frozen,
// cut off, locked and shown Migrating, with its journal.
func (td *testDaemon) checkStillMigrating(t *testing.T, name string, op *operations.Operation) {
	t.Helper()
	select {
	case <-op.Done():
		t.Fatal("the settle ended")
	default:
	}
	inst := td.insts.get(name)
	if inst == nil || !lockHeld(inst) {
		t.Fatal("instance not locked")
	}
	if got := td.status(t, name); got != StatusMigrating {
		t.Errorf("list shows %q, want %q", got, StatusMigrating)
	}
	if cg := td.cgroup(name); !cg.frozen || len(td.fcg.eventLog()) != 0 {
		t.Errorf("frozen %v, freezer events %v; want frozen, untouched", cg.frozen, td.fcg.eventLog())
	}
	if _, up := td.fnet.isAttached(name); up {
		t.Error("host link up")
	}
	if _, ok := td.journal(t, name); !ok {
		t.Error("journal gone")
	}
	if td.frt.count("Kill "+name) != 0 {
		t.Error("container killed")
	}
}

// TestSettleSourceCancelled: a daemon that stops while a move is
// unsettled stops asking; the journal stays, and the next daemon settles
// the move.
func TestSettleSourceCancelled(t *testing.T) {
	td := newTestDaemon(t)
	td.frozenSource(t, "c1", state.PhaseRestoring)
	td.fpeer.fail(errPeerUnreachable)

	td.startDaemon(t)
	op := td.settleOp(t)
	td.waitAsked(t, 1)
	td.checkStillMigrating(t, "c1", op)

	td.shutdown(t)
	select {
	case <-op.Done():
	default:
		t.Fatal("Shutdown returned before the settle ended")
	}
	if st := op.Render().Status; st != api.OperationCancelled {
		t.Errorf("settle operation %s, want %s", st, api.OperationCancelled)
	}
	if err := op.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("settle error %v, want context.Canceled", err)
	}
	if lines := td.logs.matching("database not open"); len(lines) != 0 {
		t.Errorf("the store was used after it closed: %q", lines)
	}
	if !td.cgroup("c1").frozen || td.frt.count("Kill c1") != 0 {
		t.Error("a cancelled settle thawed or killed the container")
	}

	// The next daemon finds the journal and settles the move.
	next := td.restart(t)
	if _, ok := next.journal(t, "c1"); !ok {
		t.Fatal("journal gone after shutdown")
	}
	next.fpeer.notFound()
	next.startDaemon(t)
	if err := waitOp(t, next.settleOp(t)); err != nil {
		t.Fatalf("settle after restart: %v", err)
	}
	next.checkResumedHere(t, "c1")
}

// TestSettleTarget: a target killed while it received a container deletes
// what it received unless the container already runs here.
func TestSettleTarget(t *testing.T) {
	journal := state.Migration{Instance: "c1", Role: state.MigrationTarget, Peer: "source-host", Name: "c1",
		Live: true, Start: true, Phase: state.PhaseRestoring}
	t.Run("not running", func(t *testing.T) {
		td := newTestDaemon(t)
		td.putInstance(t, "c1", state.StateStopped)
		td.putJournal(t, journal)

		td.startDaemon(t)
		if err := waitOp(t, td.settleOp(t)); err != nil {
			t.Fatalf("settle: %v", err)
		}

		if _, ok := td.storedInstance(t, "c1"); ok || td.insts.get("c1") != nil {
			t.Error("half-received instance kept")
		}
		if _, ok := td.journal(t, "c1"); ok {
			t.Error("journal left")
		}
		if td.storage.VolumeExists(containerVolume("c1")) {
			t.Error("half-received volume kept")
		}
	})
	t.Run("running", func(t *testing.T) {
		td := newTestDaemon(t)
		rec := td.putInstance(t, "c1", state.StateRunning)
		td.frt.run("c1")
		td.fnet.attach("c1", rec.Address, true)
		td.putJournal(t, journal)

		td.startDaemon(t)
		if err := waitOp(t, td.settleOp(t)); err != nil {
			t.Fatalf("settle: %v", err)
		}

		td.checkResumedHere(t, "c1")
		if n := td.frt.count("Delete c1"); n != 0 {
			t.Errorf("runtime Delete called %d times", n)
		}
	})
}

// TestSettleJournalWithoutInstance: a journal whose instance is gone is
// dropped at start.
func TestSettleJournalWithoutInstance(t *testing.T) {
	td := newTestDaemon(t)
	td.addPeer(t)
	td.putJournal(t, sourceJournal("ghost", state.PhaseRestoring))

	td.startDaemon(t)

	if _, ok := td.journal(t, "ghost"); ok {
		t.Error("journal kept")
	}
	if ops := td.opsNamed("Settling migration"); len(ops) != 0 {
		t.Errorf("%d settle operations", len(ops))
	}
	if n := td.fpeer.callCount(); n != 0 {
		t.Errorf("peer asked %d times", n)
	}
}

// TestRunsOnTarget: how the target's answer is read.
func TestRunsOnTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		peer    func(p *fakePeer)
		start   bool
		want    bool
		wantErr bool
	}{
		{"running", func(p *fakePeer) { p.answer(api.StatusRunning) }, true, true, false},
		{"stopped, a stopped container's move", func(p *fakePeer) { p.answer(api.StatusStopped) }, false, true, false},
		// Stopped there although it was to run: it ran there and stopped
		// since (a target shows an instance it receives Migrating until
		// its restore is done), so the move completed.
		{"stopped, but it was to run", func(p *fakePeer) { p.answer(api.StatusStopped) }, true, true, false},
		{"still migrating there", func(p *fakePeer) { p.answer(StatusMigrating) }, true, false, true},
		{"404", func(p *fakePeer) { p.notFound() }, true, false, false},
		{"409", func(p *fakePeer) { p.fail(&client.Error{Code: 409, Message: "busy"}) }, true, false, true},
		{"unreachable", func(p *fakePeer) { p.fail(errPeerUnreachable) }, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDaemon(t)
			td.addPeer(t)
			tc.peer(td.fpeer)
			j := sourceJournal("c1", state.PhaseRestoring)
			j.Start = tc.start
			got, err := td.runsOnTarget(context.Background(), j)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("runsOnTarget = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	t.Run("unknown peer", func(t *testing.T) {
		td := newTestDaemon(t)
		td.fpeer.answer(api.StatusRunning)
		if got, err := td.runsOnTarget(context.Background(), sourceJournal("c1", state.PhaseRestoring)); got || err == nil {
			t.Errorf("runsOnTarget = %v, %v; want an error", got, err)
		}
	})
}
