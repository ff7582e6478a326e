// Package integration drives real vesseld daemons through the vessel CLI
// and the client package, as root, against the real kernel, runc, CRIU and
// btrfs. Every test host has its own root, run dir, socket, bridge, subnet
// and cgroup parent, and is torn down (with a forced fallback) even when a
// test fails.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/client"
)

// binDir holds the binaries built for this test run.
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration tests must run as root")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "vessel-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/...")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// host is one vesseld under test.
type host struct {
	t        *testing.T
	id       string
	root     string
	runDir   string
	socket   string
	bridge   string
	subnet   netip.Prefix
	cgParent string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
	client   *client.Client
}

// newHost starts a daemon with its own everything and registers its
// teardown.
func newHost(t *testing.T) *host {
	t.Helper()
	id := randHex(3)
	root := filepath.Join(os.TempDir(), "vessel-it-"+id)
	h := &host{
		t:        t,
		id:       id,
		root:     root,
		runDir:   filepath.Join(root, "run"),
		socket:   filepath.Join(root, "unix.socket"),
		bridge:   "vt" + id,
		subnet:   freeSubnet(t),
		cgParent: "/vessel-it-" + id,
		logPath:  filepath.Join(os.TempDir(), "vessel-it-"+id+".log"),
	}
	h.client = client.NewUnix(h.socket)
	t.Cleanup(h.teardown)
	h.start()
	return h
}

// freeSubnet picks a /24 in 10.200-249.x.0 not used by any host address.
func freeSubnet(t *testing.T) netip.Prefix {
	out, _ := exec.Command("ip", "-4", "-o", "addr").Output()
	for i := 0; i < 100; i++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200 + b[0]%50, b[1], 0}), 24)
		prefix := strings.TrimSuffix(p.Addr().String(), "0")
		if !strings.Contains(string(out), " "+prefix) {
			return p
		}
	}
	t.Fatal("no free subnet")
	return netip.Prefix{}
}

func (h *host) args() []string {
	return []string{
		"--root", h.root, "--run-dir", h.runDir, "--socket", h.socket,
		"--bridge", h.bridge, "--subnet", h.subnet.String(),
		"--cgroup-parent", h.cgParent, "--storage-size", "2048",
		"--name", "it-" + h.id, "--stop-timeout", "20s", "--log-level", "debug",
	}
}

// start runs vesseld and waits until its API answers.
func (h *host) start() {
	h.t.Helper()
	logf, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(binDir, "vesseld"), h.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a test's signals never reach it by accident.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.cmd = cmd
	h.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(h.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := h.client.Server(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-h.exited:
			h.t.Fatalf("vesseld exited at start:\n%s", h.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	h.t.Fatalf("vesseld did not answer within 60s:\n%s", h.log())
}

// stopDaemon ends vesseld with SIGTERM (containers keep running).
func (h *host) stopDaemon() {
	h.t.Helper()
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(60 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
		h.t.Errorf("vesseld did not exit on SIGTERM")
	}
	h.cmd = nil
}

// killDaemon ends vesseld with SIGKILL, as a crash would.
func (h *host) killDaemon() {
	h.t.Helper()
	_ = h.cmd.Process.Kill()
	<-h.exited
	h.cmd = nil
}

func (h *host) restartDaemon() {
	h.t.Helper()
	h.stopDaemon()
	h.start()
}

func (h *host) log() string {
	b, _ := os.ReadFile(h.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// result is a finished CLI run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// vessel runs the CLI against this host.
func (h *host) vessel(args ...string) result {
	h.t.Helper()
	return h.vesselIn("", args...)
}

// vesselIn runs the CLI with stdin.
func (h *host) vesselIn(stdin string, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "vessel"), args...)
	cmd.Env = h.env()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		h.t.Fatalf("vessel %v: %v", args, err)
	}
	return r
}

func (h *host) env() []string {
	return append(os.Environ(),
		"VESSEL_SOCKET="+h.socket,
		"VESSEL_CONFIG="+filepath.Join(h.root, "cli-config.yml"))
}

// ok runs the CLI and fails the test unless it exits 0.
func (h *host) ok(args ...string) string {
	h.t.Helper()
	r := h.vessel(args...)
	if r.code != 0 {
		h.t.Fatalf("vessel %s: %s\ndaemon log:\n%s", strings.Join(args, " "), r, h.log())
	}
	return r.stdout
}

// fails runs the CLI, wants a non-zero exit and an error containing want.
func (h *host) fails(want string, args ...string) result {
	h.t.Helper()
	r := h.vessel(args...)
	if r.code == 0 {
		h.t.Fatalf("vessel %s succeeded, want failure %q:\n%s", strings.Join(args, " "), want, r)
	}
	if !strings.Contains(r.stderr, want) {
		h.t.Fatalf("vessel %s: stderr does not mention %q:\n%s", strings.Join(args, " "), want, r)
	}
	return r
}
