package daemon

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
)

// TestLockHandOffToSettle: a move whose outcome is unknown hands its lock
// to the settle operation (migrationSource.handOff) without ever letting
// it go. A request queued on the instance meanwhile (a snapshot, whose
// freeze-thaw would resume a container that may run on the target now; an
// update; a start) waits until the settle has decided, then runs against
// the settled instance. The target does not answer (a few times) before
// it does.
func TestLockHandOffToSettle(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// running: the move was live (the container runs here, frozen);
		// else cold (stopped here).
		running bool
		request func(td *testDaemon) (*operations.Operation, error)
		// answer is the target's answer once it answers.
		answer func(p *fakePeer)
		check  func(t *testing.T, td *testDaemon, err error)
	}{
		{
			name: "snapshot", running: true,
			request: func(td *testDaemon) (*operations.Operation, error) {
				return td.CreateSnapshot(ctx, "c1", api.SnapshotsPost{Name: "s1"})
			},
			answer: (*fakePeer).notFound,
			check: func(t *testing.T, td *testDaemon, err error) {
				if err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				if _, err := td.state.GetSnapshot("c1", "s1"); err != nil {
					t.Errorf("snapshot record: %v", err)
				}
				// The settle thawed the container; the snapshot froze and
				// thawed it after that, never before.
				cg := td.cfg.cgroupPath("c1")
				want := []string{"thaw " + cg, "freeze " + cg, "thaw " + cg}
				if got := td.fcg.eventLog(); !slices.Equal(got, want) {
					t.Errorf("freezer events %q, want %q", got, want)
				}
			},
		},
		{
			name: "update", running: true,
			request: func(td *testDaemon) (*operations.Operation, error) {
				return td.UpdateInstance(ctx, "c1", api.InstancePatch{Config: map[string]string{"limits.memory": "128MiB"}})
			},
			answer: (*fakePeer).notFound,
			check: func(t *testing.T, td *testDaemon, err error) {
				if err != nil {
					t.Fatalf("update: %v", err)
				}
				sets := td.cgroup("c1").sets
				if len(sets) == 0 || sets[len(sets)-1].MemoryMax != 128<<20 {
					t.Errorf("limits written: %+v", sets)
				}
				if rec, _ := td.storedInstance(t, "c1"); rec.Config["limits.memory"] != "128MiB" {
					t.Errorf("config stored: %v", rec.Config)
				}
			},
		},
		{
			// A cold move had stopped the container; the target runs it:
			// the start queued here must not run it a second time.
			name: "start", running: false,
			request: func(td *testDaemon) (*operations.Operation, error) {
				return td.ChangeState(ctx, "c1", api.InstanceStatePut{Action: api.ActionStart})
			},
			answer: func(p *fakePeer) { p.answer(api.StatusRunning) },
			check: func(t *testing.T, td *testDaemon, err error) {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("start of a container moved away: %v, want ErrNotFound", err)
				}
				if n := td.frt.count("Start c1"); n != 0 {
					t.Errorf("started here %d times", n)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				testHandOff(t, tc.running, tc.request, tc.answer, tc.check)
			})
		})
	}
}

// testHandOff runs one case of TestLockHandOffToSettle in a synctest
// bubble: synctest.Wait tells when the request waits on the lock, and the
// settle's retry period passes at once.
func testHandOff(t *testing.T, running bool, request func(*testDaemon) (*operations.Operation, error),
	answer func(*fakePeer), check func(*testing.T, *testDaemon, error)) {
	ctx := context.Background()
	td := newTestDaemon(t)
	td.inBubble(t)
	td.addPeer(t)
	act, j := actMove, sourceJournal("c1", state.PhaseRestoring)
	if running {
		inst := td.addRunning(t, "c1")
		td.fnet.attach("c1", inst.record().Address, false)
		td.freeze("c1")
		act = actLiveMove
	} else {
		td.addInstance(t, "c1", state.StateStopped)
		j.Live, j.WasRunning = false, true
	}
	td.putJournal(t, j)
	// The move holds the instance; the target does not answer.
	inst, release, err := td.lock(ctx, "c1", act, false)
	if err != nil {
		t.Fatal(err)
	}
	td.fpeer.fail(errPeerUnreachable)
	op, err := request(td)
	if err != nil {
		t.Fatalf("request refused: %v", err)
	}
	synctest.Wait() // the request waits on the lock
	sets := len(td.cgroup("c1").sets)

	// The outcome is unknown: the lock passes to the settle.
	m := &migrationSource{d: td.Daemon, inst: inst, name: "c1", journal: j, unsettled: true}
	if !m.handOff(release) {
		t.Fatal("an unsettled move did not hand its lock off")
	}
	settle := td.settleOp(t)
	for asked := 1; asked <= 3; asked++ {
		synctest.Wait() // the settle waits to ask the target again
		if n := td.fpeer.callCount(); n != asked {
			t.Fatalf("peer asked %d times, want %d", n, asked)
		}
		// The settle holds the instance: the request waits, and has done
		// nothing.
		if !pending(op) || !pending(settle) {
			t.Fatalf("request pending %v, settle pending %v", pending(op), pending(settle))
		}
		if !lockHeld(inst) || td.status(t, "c1") != StatusMigrating {
			t.Errorf("locked %v, list shows %q", lockHeld(inst), td.status(t, "c1"))
		}
		if ev := td.fcg.eventLog(); len(ev) != 0 {
			t.Fatalf("freezer touched while unsettled: %v", ev)
		}
		if n := len(td.cgroup("c1").sets); n != sets {
			t.Fatal("limits written while unsettled")
		}
		if running && !td.cgroup("c1").frozen {
			t.Fatal("thawed while unsettled")
		}
		if asked == 3 {
			answer(td.fpeer) // at the next ask
		}
		time.Sleep(journalRetry)
	}
	if err := waitOp(t, settle); err != nil {
		t.Fatalf("settle: %v", err)
	}
	check(t, td, waitOp(t, op))
}
