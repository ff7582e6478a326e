package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/trust"
)

// serve runs the API of core on a loopback listener with limits l, every
// caller authenticated as a.
func serve(t *testing.T, core Core, a trust.Auth, l Limits) string {
	t.Helper()
	s := New(core, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.authFor = func(*http.Request) trust.Auth { return a }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(s, l)
	go func() { _ = srv.Serve(Listen(ln, l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestJSONBodyTooLarge: a control request's body beyond MaxJSONBody is
// refused with 413 and the kind's message, before it reaches the daemon.
func TestJSONBodyTooLarge(t *testing.T) {
	core := &authCore{}
	addr := serve(t, core, trust.AuthLocal, DefaultLimits())
	body := `{"name":"x","config":{"user.pad":"` + strings.Repeat("a", MaxJSONBody) + `"}}`
	resp, err := http.Post("http://"+addr+"/1.0/instances", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env api.Response
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || env.ErrorCode != http.StatusRequestEntityTooLarge ||
		!strings.Contains(env.Error, "request body larger than") {
		t.Errorf("status %d, reply %+v: want 413 naming the limit", resp.StatusCode, env)
	}
	if len(core.calls) != 0 {
		t.Errorf("the oversized request reached the core: %v", core.calls)
	}
}

// TestSlowBodyCut: a client that sends its headers, then trickles the body,
// has its connection closed by the server after ReadTimeout; a request on
// another connection is served meanwhile.
func TestSlowBodyCut(t *testing.T) {
	l := DefaultLimits()
	l.ReadTimeout = 300 * time.Millisecond
	addr := serve(t, &authCore{}, trust.AuthNone, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /1.0/certificates HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		// Trickle until the server closes: a write or the read fails.
		go func() {
			for range time.Tick(50 * time.Millisecond) {
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		_, _ = io.ReadAll(c)
		close(closed)
	}()
	resp, err := http.Get("http://" + addr + "/1.0")
	if err != nil {
		t.Fatalf("a normal request while a slow one is held: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("normal request: status %d", resp.StatusCode)
	}
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("the server kept the slow connection open")
	}
}

// TestLongRouteKeepsConnection: a long route (an operation wait here) is
// not cut by WriteTimeout, which ends an ordinary request's connection.
func TestLongRouteKeepsConnection(t *testing.T) {
	core := &waitCore{authCore: &authCore{}}
	l := DefaultLimits()
	l.WriteTimeout = 200 * time.Millisecond
	addr := serve(t, core, trust.AuthLocal, l)
	// The operation runs 4x WriteTimeout; the wait returns when it ends.
	resp, err := http.Get("http://" + addr + "/1.0/operations/" + core.startSleeper(800*time.Millisecond) + "/wait")
	if err != nil {
		t.Fatalf("wait past WriteTimeout: %v", err)
	}
	defer resp.Body.Close()
	var env api.Response
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("wait past WriteTimeout: reply cut: %v", err)
	}
	var op api.Operation
	if err := json.Unmarshal(env.Metadata, &op); err != nil || op.Status != "Success" {
		t.Errorf("wait reply %+v (%v), want the finished operation", op, err)
	}
}

// TestConnectionCap: connections beyond MaxConns wait in the accept queue
// until one of the served ones closes; then they are served.
func TestConnectionCap(t *testing.T) {
	l := DefaultLimits()
	l.MaxConns = 2
	l.ReadHeaderTimeout = time.Hour // the held connections stay until closed
	addr := serve(t, &authCore{}, trust.AuthNone, l)
	var held []net.Conn
	for range l.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	served := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /1.0 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			served <- err
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		served <- err
	}()
	select {
	case err := <-served:
		t.Fatalf("a connection beyond the cap was served (%v) while %d were held", err, l.MaxConns)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	if err := <-served; err != nil {
		t.Fatalf("the waiting connection, once a slot freed: %v", err)
	}
}

// TestLimitListenerClose: Close wakes an Accept waiting for a slot.
func TestLimitListenerClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := Listen(ln, Limits{MaxConns: 1})
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			defer c.Close()
		}
	}()
	c, err := ll.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := ll.Accept()
		errc <- err
	}()
	_ = ll.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
}

// waitCore runs operations for TestLongRouteKeepsConnection.
type waitCore struct {
	*authCore
	ops *operations.Registry
}

func (w *waitCore) Operations() *operations.Registry { return w.ops }

// startSleeper starts an operation that takes d and returns its id.
func (w *waitCore) startSleeper(d time.Duration) string {
	if w.ops == nil {
		w.ops = operations.NewRegistry()
	}
	op := w.ops.Start(context.Background(), "sleep", nil, func(ctx context.Context, _ *operations.Operation) error {
		time.Sleep(d)
		return nil
	})
	return op.Render().ID
}
