// Package operations runs long work (launch, stop, snapshot, migrate) in the
// background and lets API clients follow it.
//
// Vocabulary:
//
//   - Operation: one piece of long work with an id, a status (Pending,
//     Running, then Success, Failure or Cancelled), metadata the work updates
//     as it goes (progress) and, when it fails, an error message. It ends
//     Cancelled when it was cancelled and its error wraps context.Canceled
//     (the work gave up because of the cancel).
//   - Registry: the daemon's table of operations. Finished ones are kept for
//     a while (Retention) so clients that poll late still see the outcome.
//
// Operations live in memory only: a daemon restart forgets them (the work
// they did is in the state database).
package operations

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vesselhost/vessel/internal/api"
)

// Retention is how long a finished operation stays visible.
const Retention = 10 * time.Minute

// ErrNotFound says no operation has that id.
var ErrNotFound = errors.New("operation not found")

// Func is the work of an operation. It should return promptly once ctx is
// cancelled, leaving nothing half-made.
type Func func(ctx context.Context, op *Operation) error

// Operation is one piece of long work. Its methods are safe for concurrent
// use.
type Operation struct {
	id          string
	description string
	resources   map[string][]string
	createdAt   time.Time
	cancel      context.CancelFunc
	done        chan struct{}

	mu        sync.Mutex
	status    string
	updatedAt time.Time
	metadata  map[string]any
	err       error
}

// ID returns the operation's id.
func (op *Operation) ID() string { return op.id }

// URL returns the operation's API path.
func (op *Operation) URL() string { return "/" + api.Version + "/operations/" + op.id }

// SetMetadata merges values into the operation's metadata (progress).
func (op *Operation) SetMetadata(kv map[string]any) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.metadata == nil {
		op.metadata = map[string]any{}
	}
	maps.Copy(op.metadata, kv)
	op.updatedAt = time.Now()
}

// Cancel asks the work to stop. It has no effect on finished operations.
func (op *Operation) Cancel() { op.cancel() }

// Done is closed when the operation has finished.
func (op *Operation) Done() <-chan struct{} { return op.done }

// Wait blocks until the operation finishes or ctx ends, and returns the
// operation's error (nil on success).
func (op *Operation) Wait(ctx context.Context) error {
	select {
	case <-op.done:
		op.mu.Lock()
		defer op.mu.Unlock()
		return op.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Render returns the operation as the API shows it.
func (op *Operation) Render() api.Operation {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := api.Operation{
		ID:          op.id,
		Description: op.description,
		CreatedAt:   op.createdAt,
		UpdatedAt:   op.updatedAt,
		Status:      op.status,
		Resources:   op.resources,
		Metadata:    maps.Clone(op.metadata),
		MayCancel:   op.status == api.OperationRunning || op.status == api.OperationPending,
	}
	if op.err != nil {
		out.Err = op.err.Error()
	}
	return out
}

func (op *Operation) finish(err error, cancelled bool) {
	op.mu.Lock()
	switch {
	case err == nil:
		op.status = api.OperationSuccess
	case cancelled:
		op.status = api.OperationCancelled
	default:
		op.status = api.OperationFailure
	}
	op.err = err
	op.updatedAt = time.Now()
	op.mu.Unlock()
	close(op.done)
}

// Registry is the table of operations.
type Registry struct {
	mu  sync.Mutex
	ops map[string]*Operation
	// wg tracks running work so a shutting-down daemon can wait for it.
	wg sync.WaitGroup
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{ops: map[string]*Operation{}} }

// Start runs fn in the background as a new operation. The work's context is
// independent of any request's: it ends only by Cancel (or the parent ctx,
// the daemon's lifetime).
func (r *Registry) Start(parent context.Context, description string, resources map[string][]string, fn Func) *Operation {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	now := time.Now()
	op := &Operation{
		id:          uuid.NewString(),
		description: description,
		resources:   resources,
		createdAt:   now,
		updatedAt:   now,
		status:      api.OperationRunning,
		cancel:      cancel,
		done:        make(chan struct{}),
	}
	r.mu.Lock()
	r.pruneLocked(now)
	r.ops[op.id] = op
	r.mu.Unlock()

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("operation %q panicked: %v", description, p)
				}
			}()
			err = fn(ctx, op)
		}()
		// Cancelled is the outcome only when the work was cancelled and its
		// error says so; an error of its own (a failed cleanup) is a Failure.
		op.finish(err, ctx.Err() != nil && errors.Is(err, context.Canceled))
	}()
	return op
}

// Get returns the operation with that id.
func (r *Registry) Get(id string) (*Operation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op, ok := r.ops[id]
	if !ok {
		return nil, fmt.Errorf("operation %q: %w", id, ErrNotFound)
	}
	return op, nil
}

// List returns every operation, oldest first.
func (r *Registry) List() []*Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(time.Now())
	out := slices.Collect(maps.Values(r.ops))
	slices.SortFunc(out, func(a, b *Operation) int { return a.createdAt.Compare(b.createdAt) })
	return out
}

// CancelAll cancels every running operation and waits for them to end.
func (r *Registry) CancelAll() {
	r.mu.Lock()
	for _, op := range r.ops {
		op.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Registry) pruneLocked(now time.Time) {
	for id, op := range r.ops {
		select {
		case <-op.done:
			op.mu.Lock()
			old := now.Sub(op.updatedAt) > Retention
			op.mu.Unlock()
			if old {
				delete(r.ops, id)
			}
		default:
		}
	}
}
