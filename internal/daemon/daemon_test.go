package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
)

// TestShutdownWaitsForSettle: Shutdown ends a settle in progress (asking
// the target, or waiting to ask again) and waits for it before it closes
// the state store; the journal stays for the next start.
func TestShutdownWaitsForSettle(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer func(p *fakePeer)
	}{
		{"while asking", (*fakePeer).hold},
		{"while waiting to ask again", func(p *fakePeer) { p.fail(errPeerUnreachable) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDaemon(t)
			td.frozenSource(t, "c1", state.PhaseRestoring)
			tc.peer(td.fpeer)
			td.startDaemon(t)
			op := td.settleOp(t)
			td.waitAsked(t, 1)

			td.shutdown(t)

			if pending(op) {
				t.Fatal("Shutdown returned before the settle ended")
			}
			if err := op.Wait(context.Background()); !errors.Is(err, context.Canceled) {
				t.Errorf("settle: %v, want context.Canceled", err)
			}
			if lines := td.logs.matching("database not open"); len(lines) != 0 {
				t.Errorf("the store was used after it closed: %q", lines)
			}
			if _, err := td.state.ListInstances(); err == nil {
				t.Error("the store is still open after Shutdown")
			}
			next := td.restart(t)
			if _, ok := next.journal(t, "c1"); !ok {
				t.Error("journal gone")
			}
		})
	}
}

// TestOperationCancelledWhileWaiting: an operation waiting for a busy
// instance, cancelled through the operations registry, ends Cancelled
// with an error that is context.Canceled (and a conflict: the instance
// was busy), and does nothing.
func TestOperationCancelledWhileWaiting(t *testing.T) {
	td := newTestDaemon(t)
	inst := td.addInstance(t, "c1", state.StateStopped)
	ctx := context.Background()
	_, release := td.mustLock(t, "c1", actUpdate)
	defer release()
	op, err := td.ChangeState(ctx, "c1", api.InstanceStatePut{Action: api.ActionStart})
	if err != nil {
		t.Fatal(err)
	}
	got, err := td.Operations().Get(op.ID())
	if err != nil {
		t.Fatal(err)
	}
	got.Cancel()
	err = waitOp(t, op)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConflict) {
		t.Errorf("cancelled operation: %v, want context.Canceled and ErrConflict", err)
	}
	r := op.Render()
	if r.Status != api.OperationCancelled || r.Err == "" || r.MayCancel {
		t.Errorf("operation status %q, error %q, may cancel %v; want %q with the error", r.Status, r.Err, r.MayCancel, api.OperationCancelled)
	}
	if td.frt.count("Start c1") != 0 || td.fnet.count("Attach c1") != 0 {
		t.Error("the cancelled start did something")
	}
	if !lockHeld(inst) || inst.record().State != state.StateStopped {
		t.Error("the cancelled operation took the lock or changed the record")
	}
}
