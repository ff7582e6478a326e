package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/server"
)

// fakeCore is the daemon as far as these tests call it; any other method
// panics (nil embedded interface).
type fakeCore struct {
	server.Core
	ops *operations.Registry
	// started is closed when the snapshot's work runs.
	started chan struct{}
	// deleteImage is DeleteImage's error.
	deleteImage error
}

func (f *fakeCore) DeleteImage(context.Context, string) error { return f.deleteImage }

func (f *fakeCore) Operations() *operations.Registry { return f.ops }

func (f *fakeCore) GetInstance(_ context.Context, name string) (api.Instance, error) {
	return api.Instance{}, api.Errorf(api.ErrNotFound, "instance %q not found", name)
}

func (f *fakeCore) CreateInstance(_ context.Context, req api.InstancesPost) (*operations.Operation, error) {
	return nil, api.Errorf(api.ErrConflict, "instance %q already exists", req.Name)
}

// CreateSnapshot starts work that runs until it is cancelled, and fails the
// way the daemon's does: wrapping ctx's error.
func (f *fakeCore) CreateSnapshot(_ context.Context, name string, _ api.SnapshotsPost) (*operations.Operation, error) {
	return f.ops.Start(context.Background(), "snapshot", nil, func(ctx context.Context, _ *operations.Operation) error {
		close(f.started)
		<-ctx.Done()
		return fmt.Errorf("snapshot of %q: %w", name, ctx.Err())
	}), nil
}

// newClient serves the real API over core on a unix socket and returns a
// client of it.
func newClient(t *testing.T, core server.Core) *client.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(server.New(core, slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return client.NewUnix(sock)
}

// TestCancelledOperation: a cancelled operation's error reaches the
// client's Wait as context.Canceled, with the daemon's message.
func TestCancelledOperation(t *testing.T) {
	core := &fakeCore{ops: operations.NewRegistry(), started: make(chan struct{})}
	defer core.ops.CancelAll()
	c := newClient(t, core)
	ctx := t.Context()

	op, err := c.CreateSnapshot(ctx, "c1", api.SnapshotsPost{Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	<-core.started
	if err := op.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	err = op.Wait(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want an error wrapping context.Canceled", err)
	}
	if want := `snapshot of "c1": context canceled`; err == nil || err.Error() != want {
		t.Errorf("Wait's message %q, want the daemon's %q", err, want)
	}
	if op.Status != api.OperationCancelled {
		t.Errorf("status %s, want %s", op.Status, api.OperationCancelled)
	}
	if got, err := c.GetOperation(ctx, op.ID); err != nil || got.Status != api.OperationCancelled {
		t.Errorf("GetOperation = %+v, %v; want status %s", got, err, api.OperationCancelled)
	}
}

// TestErrorKinds: an error reply's code comes back as its kind, with the
// daemon's message.
func TestErrorKinds(t *testing.T) {
	ctx := t.Context()
	kinds := []error{api.ErrInvalid, api.ErrNotFound, api.ErrConflict, api.ErrForbidden, api.ErrTooLarge, context.Canceled}
	cases := []struct {
		name string
		err  error // what the core returns
		kind error // what errors.Is must find on the client (nil: none)
		code int
	}{
		{"invalid", api.Errorf(api.ErrInvalid, "bad image name %q", "-x"), api.ErrInvalid, http.StatusBadRequest},
		{"not found", api.Errorf(api.ErrNotFound, "image %q not found", "x"), api.ErrNotFound, http.StatusNotFound},
		{"conflict", api.Errorf(api.ErrConflict, "image %q is in use by web1", "x"), api.ErrConflict, http.StatusConflict},
		{"forbidden", api.Errorf(api.ErrForbidden, "not for you"), api.ErrForbidden, http.StatusForbidden},
		{"too large", api.Errorf(api.ErrTooLarge, "image larger than 1 GiB"), api.ErrTooLarge, http.StatusRequestEntityTooLarge},
		{"cancelled", fmt.Errorf("delete image %q: %w", "x", context.Canceled), context.Canceled, api.StatusCanceled},
		{"other", errors.New("disk on fire"), nil, http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, &fakeCore{ops: operations.NewRegistry(), deleteImage: tc.err})
			err := c.DeleteImage(ctx, "x")
			if err == nil || err.Error() != tc.err.Error() { //nolint:errorlint // compares messages, not identities
				t.Fatalf("DeleteImage = %v, want the daemon's message %q", err, tc.err)
			}
			for _, k := range kinds {
				if got, want := errors.Is(err, k), errors.Is(tc.kind, k); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, k, got, want)
				}
			}
			if got := client.StatusCode(err); got != tc.code {
				t.Errorf("StatusCode = %d, want %d", got, tc.code)
			}
		})
	}

	// Through the other methods' paths too: GET and an async POST.
	c := newClient(t, &fakeCore{ops: operations.NewRegistry()})
	if _, err := c.Instance(ctx, "web1"); !errors.Is(err, api.ErrNotFound) || err.Error() != `instance "web1" not found` {
		t.Errorf("Instance = %v, want api.ErrNotFound with the daemon's message", err)
	}
	if _, err := c.CreateInstance(ctx, api.InstancesPost{Name: "web1"}); !errors.Is(err, api.ErrConflict) || err.Error() != `instance "web1" already exists` {
		t.Errorf("CreateInstance = %v, want api.ErrConflict with the daemon's message", err)
	}
	if _, err := c.GetOperation(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("GetOperation(nope) = %v, want api.ErrNotFound", err)
	}
}
