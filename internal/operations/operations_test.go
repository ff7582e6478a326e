package operations

import (
	"context"
	"errors"
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
