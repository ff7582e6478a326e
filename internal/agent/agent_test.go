package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pipeAgent serves a Server over in-memory connections: each dial is a
// fresh session, as a guest starts one when the host reconnects.
type pipeAgent struct {
	srv  *Server
	wg   sync.WaitGroup
	mu   sync.Mutex
	ends []net.Conn
}

func (p *pipeAgent) dial(context.Context) (net.Conn, error) {
	host, guest := net.Pipe()
	p.mu.Lock()
	p.ends = append(p.ends, guest)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.ServeConn(guest)
	}()
	return host, nil
}

func (p *pipeAgent) close() {
	p.mu.Lock()
	for _, c := range p.ends {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func newAgent(t *testing.T, srv *Server) *Client {
	t.Helper()
	p := &pipeAgent{srv: srv}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, p.dial, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		p.close()
	})
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPingReportsTheGuest(t *testing.T) {
	c := newAgent(t, &Server{Version: "test", ReadyAfter: 1500 * time.Millisecond, Init: "/sbin/init"})
	info, err := c.Ping(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	if info.AgentVersion != "test" || info.ReadyAfter != 1.5 || info.Init != "/sbin/init" || info.Uptime <= 0 || info.Kernel == "" {
		t.Fatalf("info %+v", info)
	}
}

func TestExecExitCodesAndOutput(t *testing.T) {
	c := newAgent(t, &Server{})
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args           []string
		code, signal   int
		stdout, stderr string
	}{
		{args: []string{"echo", "hello"}, stdout: "hello\n"},
		{args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, code: 3, stdout: "out\n", stderr: "err\n"},
		{args: []string{"sh", "-c", "kill -TERM $$"}, code: 128 + 15, signal: 15},
		{args: []string{"no-such-command-here"}, code: 127, stderr: "no-such-command-here"},
		{args: []string{plain}, code: 126, stderr: plain},
	} {
		var out, errb bytes.Buffer
		st, err := c.Exec(ctxT(t), ExecOptions{Args: tc.args, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if st.Code != tc.code || st.Signal != tc.signal {
			t.Errorf("%v: status %+v, want code %d signal %d", tc.args, st, tc.code, tc.signal)
		}
		if out.String() != tc.stdout || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%v: stdout %q stderr %q", tc.args, out.String(), errb.String())
		}
	}
}

func TestExecEnvCwdAndStdin(t *testing.T) {
	c := newAgent(t, &Server{})
	dir := t.TempDir()
	var out bytes.Buffer
	st, err := c.Exec(ctxT(t), ExecOptions{
		Args:   []string{"sh", "-c", `echo "$FOO $PWD"; wc -c`},
		Env:    []string{"FOO=bar"},
		Cwd:    dir,
		Stdin:  strings.NewReader(strings.Repeat("x", 300000)),
		Stdout: &out,
	})
	if err != nil || st.Code != 0 {
		t.Fatal(st, err)
	}
	if got := strings.Fields(out.String()); len(got) != 3 || got[0] != "bar" || got[1] != dir || got[2] != "300000" {
		t.Fatalf("output %q", out.String())
	}
}

func TestExecTTYAndResize(t *testing.T) {
	c := newAgent(t, &Server{})
	resize := make(chan WinSize, 1)
	stdinR, stdinW := io.Pipe()
	var out syncBuf
	done := make(chan struct{})
	var st ExitStatus
	var err error
	go func() {
		defer close(done)
		// The shell prints the size it starts with, then waits for a line
		// (sent once the resize is in) and prints the size again.
		st, err = c.Exec(ctxT(t), ExecOptions{
			Args: []string{"sh", "-c", `test -t 0 && echo tty; stty size; read x; stty size; exit 5`},
			TTY:  true, Width: 100, Height: 30,
			Stdin: stdinR, Stdout: &out, Resize: resize,
		})
	}()
	waitFor(t, func() bool { return strings.Contains(out.String(), "30 100") })
	resize <- WinSize{Width: 120, Height: 40}
	// The resize and the line travel in order on one stream.
	_, _ = stdinW.Write([]byte("go\n"))
	<-done
	_ = stdinW.Close()
	if err != nil || st.Code != 5 {
		t.Fatal(st, err)
	}
	if s := out.String(); !strings.Contains(s, "tty") || !strings.Contains(s, "40 120") {
		t.Fatalf("terminal output %q", s)
	}
}

func TestExecCancelKills(t *testing.T) {
	c := newAgent(t, &Server{})
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, ExecOptions{Args: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 600"}})
		errc <- err
	}()
	var pid int
	waitFor(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		_, _ = fmt.Sscan(string(b), &pid)
		return pid > 0
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("exec after cancel: %v", err)
	}
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil })
}

func TestPushAndPullLargeFile(t *testing.T) {
	dir := t.TempDir()
	c := newAgent(t, &Server{Root: dir})
	data := make([]byte, 5<<20+123)
	_, _ = rand.Read(data)
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.PushFile(ctxT(t), "/f", bytes.NewReader(data), FileOptions{Mode: 0o750, UID: uid, GID: gid}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil || fi.Mode().Perm() != 0o750 || fi.Size() != int64(len(data)) {
		t.Fatalf("pushed file: %v %v", fi, err)
	}
	var back bytes.Buffer
	info, err := c.PullFile(ctxT(t), "/f", &back)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(back.Bytes()) != sha256.Sum256(data) || info.Size != int64(len(data)) || info.Mode != 0o750 || info.UID != uid {
		t.Fatalf("pulled %d bytes, info %+v", back.Len(), info)
	}
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
}

func TestPushStaysInRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	c := newAgent(t, &Server{Root: dir})
	err := c.PushFile(ctxT(t), "/escape/f", strings.NewReader("x"), FileOptions{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	if !errors.Is(err, ErrAgent) {
		t.Fatalf("push through an escaping link: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("push escaped the root: %v", ents)
	}
	if err := c.PushFile(ctxT(t), "/missing/f", strings.NewReader("x"), FileOptions{}); !errors.Is(err, ErrAgent) {
		t.Fatalf("push into a missing directory: %v", err)
	}
	if _, err := c.PullFile(ctxT(t), "/nothing", io.Discard); !errors.Is(err, ErrAgent) {
		t.Fatalf("pull of a missing file: %v", err)
	}
	// An absolute link inside the root is taken in the root, as the guest
	// takes it.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sub", filepath.Join(dir, "inner")); err != nil {
		t.Fatal(err)
	}
	if err := c.PushFile(ctxT(t), "/inner/f", strings.NewReader("x"), FileOptions{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub/f")); err != nil || string(b) != "x" {
		t.Fatalf("push through an absolute link: %q %v", b, err)
	}
	// The session survives refused requests.
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestReconnectStartsAFreshSession(t *testing.T) {
	p := &pipeAgent{srv: &Server{}}
	defer p.close()
	ctx := ctxT(t)
	c1, _, err := Dial(ctx, p.dial, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The host goes away in the middle of a command.
	errc := make(chan error, 1)
	go func() {
		_, err := c1.Exec(ctx, ExecOptions{Args: []string{"sleep", "600"}})
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = c1.Close()
	if err := <-errc; err == nil {
		t.Fatal("exec survived its session")
	}
	c2, _, err := Dial(ctx, p.dial, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	var out bytes.Buffer
	if st, err := c2.Exec(ctx, ExecOptions{Args: []string{"echo", "again"}, Stdout: &out}); err != nil || st.Code != 0 || out.String() != "again\n" {
		t.Fatal(st, err, out.String())
	}
}

func TestDialRetriesUntilTheAgentAnswers(t *testing.T) {
	p := &pipeAgent{srv: &Server{}}
	defer p.close()
	fails := 3
	dial := func(ctx context.Context) (net.Conn, error) {
		if fails > 0 {
			fails--
			return nil, errors.New("no socket yet")
		}
		return p.dial(ctx)
	}
	c, _, err := Dial(ctxT(t), dial, DialOptions{Retry: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	never := func(context.Context) (net.Conn, error) { return nil, errors.New("refused") }
	if _, _, err := Dial(ctx, never, DialOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial of an absent agent: %v", err)
	}
}

// noClose keeps a connection open under a session's Close, as QEMU's
// virtio-serial port keeps the guest's side open whatever the host does.
type noClose struct{ net.Conn }

func (noClose) Close() error { return nil }

func TestDialSkipsAStaleSession(t *testing.T) {
	p := &pipeAgent{srv: &Server{}}
	defer p.close()
	attempts := 0
	dial := func(ctx context.Context) (net.Conn, error) {
		attempts++
		host, err := p.dial(ctx)
		if err != nil || attempts > 1 {
			return host, err
		}
		// A previous host used this session and went away without the
		// guest noticing: its session is still there.
		old, err := NewClient(noClose{host})
		if err != nil {
			return nil, err
		}
		if _, err := old.Ping(ctx); err != nil {
			return nil, err
		}
		_ = host.SetReadDeadline(time.Unix(1, 0)) // end old's reader
		_ = old.Close()
		_ = host.SetReadDeadline(time.Time{})
		return host, nil
	}
	c, info, err := Dial(ctxT(t), dial, DialOptions{Stale: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if attempts != 2 || info.SessionStreams != 1 {
		t.Fatalf("%d attempts, session streams %d", attempts, info.SessionStreams)
	}
}

func TestVersionMismatchIsRefused(t *testing.T) {
	host, guest := net.Pipe()
	srv := &Server{}
	go func() { _ = srv.ServeConn(guest) }()
	c, err := NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	st, err := c.sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	fw := &frameWriter{w: st}
	_ = fw.json(frameHeader, request{Version: ProtocolVersion + 1, Op: opPing})
	var resp response
	if err := (&frameReader{r: st}).header(&resp); err != nil || !strings.Contains(resp.Error, "protocol version") {
		t.Fatalf("answer %+v %v", resp, err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond; the test's deadline bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(10 * time.Millisecond)
	}
}
