package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
)

// TestTransitions checks every action of the table from a stopped and a
// running instance, with and without --force, through lock (what an
// operation gets once it holds the instance) and checkNow (what the
// request gets): allowed, or refused with the exact message. It also
// checks the busy status list shows while the action holds the instance.
func TestTransitions(t *testing.T) {
	const (
		ok            = ""
		notRunning    = "instance %q is not running"
		already       = "instance %q is already running"
		stopFirst     = "instance %q is running: stop it first or use --force"
		restoreForce  = "instance %q is running: restoring stops it, use --force"
		copyStopped   = "instance %q is running: stop it, or copy one of its snapshots"
		statefulSnap  = "instance %q is not running: a stateful snapshot saves running processes"
		liveNeedsRuns = "instance %q is not running: a live move needs a running container"
	)
	// Outcomes from: stopped, running, stopped with --force, running with
	// --force; and the busy status ("" keeps Running/Stopped).
	want := map[action]struct {
		out  [4]string
		busy string
	}{
		actStart:            {[4]string{ok, already, ok, already}, api.StatusStarting},
		actStop:             {[4]string{notRunning, ok, notRunning, ok}, api.StatusStopping},
		actRestart:          {[4]string{notRunning, ok, notRunning, ok}, api.StatusStopping},
		actDelete:           {[4]string{ok, stopFirst, ok, ok}, api.StatusStopping},
		actUpdate:           {[4]string{ok, ok, ok, ok}, ""},
		actExec:             {[4]string{notRunning, ok, notRunning, ok}, ""},
		actSnapshot:         {[4]string{ok, ok, ok, ok}, ""},
		actStatefulSnapshot: {[4]string{statefulSnap, ok, statefulSnap, ok}, ""},
		actDeleteSnapshot:   {[4]string{ok, ok, ok, ok}, ""},
		actRestore:          {[4]string{ok, restoreForce, ok, ok}, api.StatusStopping},
		actStatefulRestore:  {[4]string{ok, restoreForce, ok, ok}, api.StatusStopping},
		actCopyFrom:         {[4]string{ok, copyStopped, ok, copyStopped}, ""},
		actMove:             {[4]string{ok, ok, ok, ok}, StatusMigrating},
		actLiveMove:         {[4]string{liveNeedsRuns, ok, liveNeedsRuns, ok}, StatusMigrating},
		actSettle:           {[4]string{ok, ok, ok, ok}, StatusMigrating},
	}
	for act := range transitions {
		if _, ok := want[act]; !ok {
			t.Errorf("action %q has no expectations in this test", act)
		}
	}
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	td.addRunning(t, "c2")
	ctx := context.Background()
	for act, w := range want {
		if _, ok := transitions[act]; !ok {
			t.Errorf("action %q is not in the transitions table", act)
			continue
		}
		for i, c := range []struct {
			name  string
			force bool
			idle  string
		}{{"c1", false, api.StatusStopped}, {"c2", false, api.StatusRunning}, {"c1", true, api.StatusStopped}, {"c2", true, api.StatusRunning}} {
			t.Run(fmt.Sprintf("%s/%s/force=%v", act, c.idle, c.force), func(t *testing.T) {
				wantErr := ""
				if w.out[i] != ok {
					wantErr = fmt.Sprintf(w.out[i], c.name)
				}
				_, cerr := td.checkNow(c.name, act, c.force)
				checkRefusal(t, "checkNow", cerr, wantErr)
				inst, release, err := td.lock(ctx, c.name, act, c.force)
				checkRefusal(t, "lock", err, wantErr)
				if err != nil {
					if lockHeld(td.insts.get(c.name)) || td.status(t, c.name) != c.idle {
						t.Fatalf("after a refusal: held %v, list shows %q", lockHeld(td.insts.get(c.name)), td.status(t, c.name))
					}
					return
				}
				busy := w.busy
				if busy == "" {
					busy = c.idle
				}
				if got := td.status(t, c.name); got != busy {
					t.Errorf("status while %s holds it = %q, want %q", act, got, busy)
				}
				if inst.name != c.name || !lockHeld(inst) {
					t.Errorf("lock returned %q, held %v", inst.name, lockHeld(inst))
				}
				release()
				release() // idempotent
				if got := td.status(t, c.name); got != c.idle {
					t.Errorf("status after release = %q, want %q", got, c.idle)
				}
				if lockHeld(inst) {
					t.Error("lock still held after release")
				}
			})
		}
	}
}

func checkRefusal(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want allowed", what, err)
	case want == "":
	case err == nil:
		t.Errorf("%s allowed, want %q", what, want)
	case err.Error() != want || !errors.Is(err, ErrConflict):
		t.Errorf("%s: %q (conflict %v), want ErrConflict %q", what, err, errors.Is(err, ErrConflict), want)
	}
}

func TestTransitionUnknownAction(t *testing.T) {
	if err := action("dance").check("c1", false, false); err == nil {
		t.Fatal("an action without a rule is allowed")
	}
}

func TestLockMissingInstance(t *testing.T) {
	td := newTestDaemon(t)
	_, _, err := td.lock(context.Background(), "nope", actStart, false)
	if !errors.Is(err, ErrNotFound) || err.Error() != `instance "nope" not found` {
		t.Fatalf("lock of a missing instance: %v, want ErrNotFound", err)
	}
}

// TestLockWaitsForHolder: a second action waits until the first releases
// the instance, then gets it.
func TestLockWaitsForHolder(t *testing.T) {
	synctest.Test(t, testLockWaitsForHolder)
}

func testLockWaitsForHolder(t *testing.T) {
	td := newTestDaemon(t)
	inst := td.addInstance(t, "c1", state.StateStopped)
	ctx := context.Background()
	_, release := td.mustLock(t, "c1", actUpdate)
	got := make(chan error, 1)
	go func() {
		_, rel, err := td.lock(ctx, "c1", actStart, false)
		if err == nil {
			if s, _ := inst.status(); s != api.StatusStarting {
				err = fmt.Errorf("status %q once the waiter holds it", s)
			}
			rel()
		}
		got <- err
	}()
	synctest.Wait() // the waiter waits
	select {
	case err := <-got:
		t.Fatalf("the waiter got a held lock (%v)", err)
	default:
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(waitBound):
		t.Fatal("the waiter did not get the released lock")
	}
}

// TestLockCancelledWait: a wait given up (its context cancelled) is an
// error that says so, and leaves the lock with its holder.
func TestLockCancelledWait(t *testing.T) {
	td := newTestDaemon(t)
	inst := td.addInstance(t, "c1", state.StateStopped)
	_, release, err := td.lock(context.Background(), "c1", actUpdate, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, _, err := td.lock(ctx, "c1", actStart, false)
		got <- err
	}()
	cancel()
	err = <-got
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConflict) {
		t.Fatalf("cancelled wait: %v, want context.Canceled and ErrConflict", err)
	}
	if want := `instance "c1" is busy: context canceled`; err.Error() != want {
		t.Errorf("cancelled wait: %q, want %q", err, want)
	}
	if !lockHeld(inst) || td.status(t, "c1") != api.StatusStopped {
		t.Errorf("after a cancelled wait: held %v, status %q", lockHeld(inst), td.status(t, "c1"))
	}
}

// TestLockInstanceDeletedWhileWaiting: an action waiting for an instance
// that its holder deletes gets ErrNotFound, not the deleted instance.
func TestLockInstanceDeletedWhileWaiting(t *testing.T) {
	synctest.Test(t, testLockInstanceDeletedWhileWaiting)
}

func testLockInstanceDeletedWhileWaiting(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	ctx := context.Background()
	inst, release := td.mustLock(t, "c1", actDelete)
	got := make(chan error, 1)
	go func() {
		_, rel, err := td.lock(ctx, "c1", actStart, false)
		if err == nil {
			rel()
		}
		got <- err
	}()
	synctest.Wait() // the waiter waits
	select {
	case err := <-got:
		t.Fatalf("the waiter got a held lock (%v)", err)
	default:
	}
	if err := td.forget(inst); err != nil {
		t.Fatal(err)
	}
	release()
	err := <-got
	if !errors.Is(err, ErrNotFound) || err.Error() != `instance "c1" not found` {
		t.Fatalf("waiter of a deleted instance: %v, want ErrNotFound", err)
	}
	if _, ok := td.storedInstance(t, "c1"); ok || td.insts.get("c1") != nil {
		t.Error("forget left the record or the registry entry")
	}
}

// TestLockChecksAgainOnceHeld: a request checked while the instance was
// stopped is checked again once its operation holds the lock: the start
// that queued behind another start is refused, and does not start twice.
func TestLockChecksAgainOnceHeld(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	ctx := context.Background()
	inst, release := td.mustLock(t, "c1", actStart)
	op, err := td.ChangeState(ctx, "c1", api.InstanceStatePut{Action: api.ActionStart})
	if err != nil {
		t.Fatalf("start request while stopped: %v", err)
	}
	if err := td.startLocked(ctx, inst); err != nil {
		t.Fatal(err)
	}
	release()
	err = waitOp(t, op)
	if !errors.Is(err, ErrConflict) || err.Error() != `instance "c1" is already running` {
		t.Fatalf("queued start: %v, want already running", err)
	}
	if n := td.frt.count("Start c1"); n != 1 {
		t.Errorf("runtime started c1 %d times", n)
	}
}
