package operations

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
)

func TestSuccessAndMetadata(t *testing.T) {
	r := NewRegistry()
	op := r.Start(context.Background(), "work", nil, func(ctx context.Context, op *Operation) error {
		op.SetMetadata(map[string]any{"progress": 50})
		return nil
	})
	if err := op.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := op.Render()
	if got.Status != api.OperationSuccess || got.Metadata["progress"] != 50 || got.MayCancel {
		t.Fatalf("rendered %+v", got)
	}
	if o, err := r.Get(op.ID()); err != nil || o != op {
		t.Fatalf("Get: %v", err)
	}
	if _, err := r.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
}

func TestFailure(t *testing.T) {
	r := NewRegistry()
	op := r.Start(context.Background(), "work", nil, func(context.Context, *Operation) error {
		return errors.New("disk full")
	})
	if err := op.Wait(context.Background()); err == nil || err.Error() != "disk full" {
		t.Fatalf("Wait = %v", err)
	}
	if got := op.Render(); got.Status != api.OperationFailure || got.Err != "disk full" {
		t.Fatalf("rendered %+v", got)
	}
}

func TestCancel(t *testing.T) {
	r := NewRegistry()
	started := make(chan struct{})
	op := r.Start(context.Background(), "slow", nil, func(ctx context.Context, _ *Operation) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	<-started
	op.Cancel()
	if err := op.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v", err)
	}
	if got := op.Render(); got.Status != api.OperationCancelled {
		t.Fatalf("status %s", got.Status)
	}
}

func TestPanicBecomesFailure(t *testing.T) {
	r := NewRegistry()
	op := r.Start(context.Background(), "bad", nil, func(context.Context, *Operation) error { panic("oops") })
	if err := op.Wait(context.Background()); err == nil {
		t.Fatal("panic not reported")
	}
	r.CancelAll()
}

// TestCancelOutcome: Cancelled needs both the cancel and an error that
// says so; anything else is a Failure.
func TestCancelOutcome(t *testing.T) {
	errCleanup := errors.New("remove the half-made volume: device busy")
	cases := []struct {
		name   string
		cancel bool
		err    func(ctx context.Context) error
		want   string
	}{
		{"cancelled, wrapped", true, func(ctx context.Context) error {
			return fmt.Errorf("snapshot of %q: %w", "c1", ctx.Err())
		}, api.OperationCancelled},
		{"cancelled, failed otherwise", true, func(context.Context) error { return errCleanup }, api.OperationFailure},
		{"not cancelled, someone else's cancel", false, func(context.Context) error {
			return fmt.Errorf("pull: %w", context.Canceled)
		}, api.OperationFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry()
			started := make(chan struct{})
			op := r.Start(context.Background(), "work", nil, func(ctx context.Context, _ *Operation) error {
				close(started)
				if c.cancel {
					<-ctx.Done()
				}
				return c.err(ctx)
			})
			<-started
			if c.cancel {
				op.Cancel()
			}
			_ = op.Wait(context.Background())
			if got := op.Render(); got.Status != c.want {
				t.Errorf("status %s, want %s (err %q)", got.Status, c.want, got.Err)
			}
		})
	}
}
