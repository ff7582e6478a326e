// Package testhost runs real vesseld daemons for integration tests and
// benchmarks, as root, against the real kernel, runc, CRIU and btrfs. Every
// host has its own root, run dir, socket, bridge, subnet and cgroup parent,
// and is torn down (with a forced fallback) even when a test fails; the
// teardown reports anything the daemon leaked.
package testhost

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
	"time"

	"github.com/vesselhost/vessel/internal/client"
)

// T is what a host needs from its caller: *testing.T satisfies it, and
// benchmarks use Runner.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

// Build compiles vessel's binaries into a new temporary directory and
// returns it. The caller removes it.
func Build() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("vessel test hosts must run as root")
	}
	dir, err := os.MkdirTemp("", "vessel-bin-")
	if err != nil {
		return "", err
	}
	if _, ok, _ := Prebuilt("vesseld"); ok {
		for _, name := range []string{"vessel", "vesseld", "vessel-shim"} {
			if _, err := copyPrebuilt(name, filepath.Join(dir, name)); err != nil {
				os.RemoveAll(dir)
				return "", err
			}
		}
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build: %w\n%s", err, out)
	}
	// The guest agent runs in a VM's initramfs, without a libc: static.
	build = exec.Command("go", "build", "-o", dir+"/", "./cmd/vessel-agent")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build: %w\n%s", err, out)
	}
	return dir, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Host is one vesseld under test.
type Host struct {
	t        T
	bin      string
	id       string
	root     string
	runDir   string
	socket   string
	bridge   string
	subnet   netip.Prefix
	cgParent string
	logPath  string
	opts     Options
	cmd      *exec.Cmd
	pid      int
	baseArgs []string
	exited   chan struct{}
	client   *client.Client
}

// Client returns an API client of this host.
func (h *Host) Client() *client.Client { return h.client }

// ID is the host's random id; Socket, Root, RunDir, Bridge, Subnet and
// CgroupParent are its own resources.
func (h *Host) ID() string           { return h.id }
func (h *Host) Socket() string       { return h.socket }
func (h *Host) Root() string         { return h.root }
func (h *Host) RunDir() string       { return h.runDir }
func (h *Host) Bridge() string       { return h.bridge }
func (h *Host) Subnet() netip.Prefix { return h.subnet }
func (h *Host) CgroupParent() string { return h.cgParent }
func (h *Host) Bin() string          { return h.bin }

// Options tune a host.
type Options struct {
	// StorageSizeMiB is the pool size (default 2048).
	StorageSizeMiB int
	// Name is the host's name (default "it-ID").
	Name string
	// ExtraArgs are more vesseld flags.
	ExtraArgs []string
	// Netns, if set, is the name of a network namespace (ip netns) the
	// daemon runs in.
	Netns string
	// Root, Bridge, Subnet and CgroupParent override the generated ones.
	Root         string
	Bridge       string
	Subnet       netip.Prefix
	CgroupParent string
	// CLIConfig is the vessel CLI configuration used by Vessel (default
	// ROOT/cli-config.yml).
	CLIConfig string
	// Detached hosts outlive the calling program (scripts/testhosts): the
	// daemon gets its own session and no teardown is registered.
	Detached bool
}

// New starts a daemon built in bin with its own everything and registers
// its teardown.
func New(t T, bin string, opts Options) *Host {
	t.Helper()
	id := randHex(3)
	root := opts.Root
	if root == "" {
		root = filepath.Join(os.TempDir(), "vessel-it-"+id)
	}
	if opts.StorageSizeMiB == 0 {
		opts.StorageSizeMiB = 2048
	}
	if opts.Name == "" {
		opts.Name = "it-" + id
	}
	h := &Host{
		t:    t,
		bin:  bin,
		opts: opts,
		id:   id,
		root: root,
		// Not inside root (0700): an unprivileged container's init must
		// pass through RUN's ancestors to reach its rootfs mount.
		runDir:   root + "-run",
		socket:   filepath.Join(root, "unix.socket"),
		bridge:   "vt" + id,
		subnet:   freeSubnet(t),
		cgParent: "/vessel-it-" + id,
		logPath:  filepath.Join(os.TempDir(), "vessel-it-"+id+".log"),
	}
	if opts.Bridge != "" {
		h.bridge = opts.Bridge
	}
	if opts.Subnet.IsValid() {
		h.subnet = opts.Subnet
	}
	if opts.CgroupParent != "" {
		h.cgParent = opts.CgroupParent
	}
	if opts.Root != "" {
		h.logPath = filepath.Join(root, "vesseld.log")
		if err := os.MkdirAll(root, 0o711); err != nil {
			t.Fatalf("%v", err)
		}
	}
	h.client = client.NewUnix(h.socket)
	if !opts.Detached {
		t.Cleanup(h.Teardown)
	}
	h.Start()
	return h
}

// Attach returns a host for a daemon started earlier (by New with Detached)
// and still running as pid, with the same options.
func Attach(t T, bin string, opts Options, pid int) *Host {
	h := &Host{t: t, bin: bin, opts: opts, id: "attached", root: opts.Root,
		runDir: opts.Root + "-run", socket: filepath.Join(opts.Root, "unix.socket"),
		bridge: opts.Bridge, subnet: opts.Subnet, cgParent: opts.CgroupParent,
		logPath: filepath.Join(opts.Root, "vesseld.log"), pid: pid}
	h.client = client.NewUnix(h.socket)
	return h
}

// PID returns the daemon's process id (0 when it is not running).
func (h *Host) PID() int { return h.pid }

// Name returns the host's name.
func (h *Host) Name() string { return h.opts.Name }

// Netns returns the network namespace the daemon runs in ("" for the
// host's).
func (h *Host) Netns() string { return h.opts.Netns }

// freeSubnet picks a /24 in 10.200-249.x.0 not used by any host address.
func freeSubnet(t T) netip.Prefix {
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
	t.Fatalf("no free subnet")
	return netip.Prefix{}
}

func (h *Host) args() []string {
	return append([]string{
		"--root", h.root, "--run-dir", h.runDir, "--socket", h.socket,
		"--bridge", h.bridge, "--subnet", h.subnet.String(),
		"--cgroup-parent", h.cgParent, "--storage-size", fmt.Sprint(h.opts.StorageSizeMiB),
		"--name", h.opts.Name, "--stop-timeout", "20s", "--log-level", "debug",
	}, h.opts.ExtraArgs...)
}

// start runs vesseld and waits until its API answers.
func (h *Host) Start() {
	h.t.Helper()
	logf, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		h.t.Fatalf("%v", err)
	}
	defer logf.Close()
	argv := append([]string{filepath.Join(h.bin, "vesseld")}, h.args()...)
	if h.opts.Netns != "" {
		argv = append([]string{"nsenter", "--net=/run/netns/" + h.opts.Netns, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (a test's signals never reach it by accident),
	// or its own session for a daemon that outlives us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !h.opts.Detached, Setsid: h.opts.Detached}
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("%v", err)
	}
	h.cmd = cmd
	h.pid = cmd.Process.Pid
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
			h.t.Fatalf("vesseld exited at start:\n%s", h.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	h.t.Fatalf("vesseld did not answer within 60s:\n%s", h.Log())
}

// stopDaemon ends vesseld with SIGTERM (containers keep running).
func (h *Host) StopDaemon() {
	h.t.Helper()
	if h.pid == 0 {
		return
	}
	_ = syscall.Kill(h.pid, syscall.SIGTERM)
	if !h.waitExit(60 * time.Second) {
		// SIGQUIT first: the Go runtime writes every goroutine's stack
		// to the daemon's log (kept: the test fails) and exits, which
		// shows where it hung.
		_ = syscall.Kill(h.pid, syscall.SIGQUIT)
		if !h.waitExit(10 * time.Second) {
			_ = syscall.Kill(h.pid, syscall.SIGKILL)
			h.waitExit(10 * time.Second)
		}
		h.t.Errorf("vesseld did not exit on SIGTERM (its goroutines' stacks are in its log, %s)", h.logPath)
	}
	h.cmd, h.pid = nil, 0
}

// waitExit waits for the daemon to end: through its Wait when we started
// it, else by polling its pid.
func (h *Host) waitExit(d time.Duration) bool {
	if h.cmd != nil {
		select {
		case <-h.exited:
			return true
		case <-time.After(d):
			return false
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if syscall.Kill(h.pid, 0) != nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// killDaemon ends vesseld with SIGKILL, as a crash would.
func (h *Host) KillDaemon() {
	h.t.Helper()
	_ = syscall.Kill(h.pid, syscall.SIGKILL)
	h.waitExit(30 * time.Second)
	h.cmd, h.pid = nil, 0
}

// SetExtraArgs replaces the extra vesseld flags used by the next Start or
// RestartDaemon (benchmarks compare daemon settings on one host).
func (h *Host) SetExtraArgs(args ...string) { h.opts.ExtraArgs = args }

func (h *Host) RestartDaemon() {
	h.t.Helper()
	h.StopDaemon()
	h.Start()
}

// RestartWith restarts the daemon with extra flags added to the host's
// own (none: back to the original flags).
func (h *Host) RestartWith(extra ...string) {
	h.t.Helper()
	if h.baseArgs == nil {
		h.baseArgs = append([]string{}, h.opts.ExtraArgs...)
	}
	h.opts.ExtraArgs = append(append([]string{}, h.baseArgs...), extra...)
	h.RestartDaemon()
}

func (h *Host) Log() string {
	b, _ := os.ReadFile(h.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// Result is a finished CLI run.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// vessel runs the CLI against this host.
func (h *Host) Vessel(args ...string) Result {
	h.t.Helper()
	return h.VesselIn("", args...)
}

// CLITimeoutEnv names a duration that replaces the 3 minutes a CLI
// command may take (a bound, not an assertion). scripts/test-v2 sets it for
// its TCG guests, where a pre-copy move's passes cross a TLS link at 2-4
// MB/s (an emulated CPU without AES-NI) and take minutes.
const CLITimeoutEnv = "VESSEL_TEST_CLI_TIMEOUT"

// cliTimeout is how long one CLI command may take.
func cliTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(CLITimeoutEnv)); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}

// vesselIn runs the CLI with stdin.
func (h *Host) VesselIn(stdin string, args ...string) Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "vessel"), args...)
	cmd.Env = h.Env()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		h.t.Fatalf("vessel %v: %v", args, err)
	}
	return r
}

func (h *Host) Env() []string {
	cfg := h.opts.CLIConfig
	if cfg == "" {
		cfg = filepath.Join(h.root, "cli-config.yml")
	}
	return append(os.Environ(), "VESSEL_SOCKET="+h.socket, "VESSEL_CONFIG="+cfg)
}

// ok runs the CLI and fails the test unless it exits 0.
func (h *Host) OK(args ...string) string {
	h.t.Helper()
	r := h.Vessel(args...)
	if r.Code != 0 {
		h.t.Fatalf("vessel %s: %s\ndaemon log:\n%s", strings.Join(args, " "), r, h.Log())
	}
	return r.Stdout
}

// fails runs the CLI, wants a non-zero exit and an error containing want.
func (h *Host) Fails(want string, args ...string) Result {
	h.t.Helper()
	r := h.Vessel(args...)
	if r.Code == 0 {
		h.t.Fatalf("vessel %s succeeded, want failure %q:\n%s", strings.Join(args, " "), want, r)
	}
	if !strings.Contains(r.Stderr, want) {
		h.t.Fatalf("vessel %s: stderr does not mention %q:\n%s", strings.Join(args, " "), want, r)
	}
	return r
}
