package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/shim"
	"github.com/vesselhost/vessel/internal/testutil"
)

// patience bounds every wait so that a broken test fails instead of hanging;
// nothing asserts how fast anything is.
const patience = 20 * time.Second

// waitFor polls cond until it holds. what may end with %s-style verbs
// filled from args at failure time.
func waitFor(t *testing.T, what string, cond func() bool, args ...func() any) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			vals := make([]any, len(args))
			for i, a := range args {
				vals[i] = a()
			}
			t.Fatalf("gave up waiting for "+what, vals...)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func receive(t *testing.T, ch <-chan Exit) Exit {
	t.Helper()
	select {
	case ex, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed without an exit")
		}
		return ex
	case <-time.After(patience):
		t.Fatal("gave up waiting for the exit")
	}
	return Exit{}
}

func (e *testEnv) logContains(id, s string) func() bool {
	return func() bool {
		b, _ := os.ReadFile(e.rt.LogPath(id))
		return strings.Contains(string(b), s)
	}
}

func TestSystemContainer(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	p := e.start("sys1", "/sbin/init")
	if p.ShimPid <= 0 || p.InitPid <= 0 {
		t.Fatalf("process %+v", p)
	}
	st, pid, err := e.rt.State(ctx, "sys1")
	if err != nil || st != StatusRunning || pid != p.InitPid {
		t.Fatalf("state = %q %d %v, want running %d", st, pid, err, p.InitPid)
	}
	waitFor(t, "booted in the log", e.logContains("sys1", "booted"))

	// busybox init rewrites its command line to "init".
	if code, out := e.execOut("sys1", "cat", "/proc/1/cmdline"); code != 0 || !strings.HasPrefix(strings.TrimPrefix(out, "/sbin/"), "init\x00") {
		t.Errorf("cat /proc/1/cmdline = %d %q", code, out)
	}
	if code, _ := e.execOut("sys1", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit 7 returned %d", code)
	}
	if code, _ := e.execOut("sys1", "/nonexistent"); code != 127 {
		t.Errorf("missing binary returned %d, want 127", code)
	}
	if code, out := e.execOut("sys1", "hostname"); code != 0 || strings.TrimSpace(out) != "host-sys1" {
		t.Errorf("hostname = %d %q", code, out)
	}
	if code, out := e.execOut("sys1", "grep", "Seccomp:", "/proc/self/status"); code != 0 || strings.Fields(out)[1] != "2" {
		t.Errorf("seccomp: %d %q", code, out)
	}
	_, out := e.execOut("sys1", "grep", "CapBnd:", "/proc/self/status")
	bnd, err := strconv.ParseUint(strings.Fields(out)[1], 16, 64)
	if err != nil {
		t.Fatalf("CapBnd %q: %v", out, err)
	}
	for _, c := range []int{unix.CAP_SYS_RESOURCE, unix.CAP_SYS_MODULE, unix.CAP_SYS_ADMIN} {
		if bnd&(1<<c) != 0 {
			t.Errorf("capability %d in the bounding set %x", c, bnd)
		}
	}
	if bnd&(1<<unix.CAP_SYS_BOOT) == 0 || bnd&(1<<unix.CAP_NET_ADMIN) == 0 {
		t.Errorf("CAP_SYS_BOOT or CAP_NET_ADMIN missing from %x", bnd)
	}

	t.Run("stdin", func(t *testing.T) {
		var stdout strings.Builder
		code, err := e.rt.Exec(ctx, "sys1", ExecOptions{
			Args:   []string{"cat"},
			Stdin:  strings.NewReader("hello\nworld\n"),
			Stdout: &stdout,
		})
		if err != nil || code != 0 || stdout.String() != "hello\nworld\n" {
			t.Errorf("cat = %d %v %q", code, err, stdout.String())
		}
	})
	t.Run("large output", func(t *testing.T) {
		code, out := e.execOut("sys1", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line$i; i=$((i+1)); done")
		if code != 0 || strings.Count(out, "\n") != 20000 || !strings.HasSuffix(out, "line19999\n") {
			t.Errorf("large output: %d, %d lines", code, strings.Count(out, "\n"))
		}
	})
	t.Run("env and cwd", func(t *testing.T) {
		var stdout strings.Builder
		code, err := e.rt.Exec(ctx, "sys1", ExecOptions{
			Args:   []string{"sh", "-c", `echo "$FOO $container $(pwd)"`},
			Env:    []string{"FOO=bar", "container=other"},
			Cwd:    "/tmp",
			Stdout: &stdout,
		})
		if err != nil || code != 0 || stdout.String() != "bar other /tmp\n" {
			t.Errorf("env = %d %v %q", code, err, stdout.String())
		}
	})
	t.Run("tty", func(t *testing.T) { testExecTTY(t, e, "sys1") })
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		var stdout testutil.SyncBuffer
		done := make(chan error, 1)
		go func() {
			_, err := e.rt.Exec(ctx, "sys1", ExecOptions{
				// The background sleep keeps runc waiting for EOF.
				Args:   []string{"sh", "-c", "sleep 1000 & echo started; wait"},
				Stdout: &stdout,
			})
			done <- err
		}()
		waitFor(t, "the exec to start", func() bool { return strings.Contains(stdout.String(), "started") })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled exec returned %v", err)
		}
		if _, out := e.execOut("sys1", "ps"); strings.Contains(out, "echo started") {
			t.Errorf("the cancelled process survived:\n%s", out)
		}
	})
}

// testExecTTY checks the terminal, its initial size and a resize.
func testExecTTY(t *testing.T, e *testEnv, id string) {
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out testutil.SyncBuffer
	resize := make(chan WinSize, 1)
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := e.rt.Exec(context.Background(), id, ExecOptions{
			Args:  []string{"sh", "-c", `tty; stty size; while read x; do [ "$x" = q ] && exit 3; stty size; done`},
			TTY:   true,
			Width: 100, Height: 30,
			Stdin: stdinR, Stdout: &out, Resize: resize,
		})
		done <- result{code, err}
	}()
	sizeRe := regexp.MustCompile(`(?m)^(\d+) (\d+)\r?$`)
	sizes := func() []string {
		var s []string
		for _, m := range sizeRe.FindAllStringSubmatch(out.String(), -1) {
			s = append(s, m[1]+"x"+m[2])
		}
		return s
	}
	output := func() any { return out.String() }
	waitFor(t, "the first stty size; output %q", func() bool { return len(sizes()) >= 1 }, output)
	if !strings.Contains(out.String(), "/dev/pts/") {
		t.Errorf("tty printed %q", out.String())
	}
	if got := sizes()[0]; got != "30x100" {
		t.Errorf("initial size %s, want 30x100 (rows x cols)", got)
	}
	resize <- WinSize{Width: 120, Height: 40}
	// runc applies the resize when its SIGWINCH handler runs, which may be
	// after our next input; ask until the new size shows.
	for i := 0; ; i++ {
		n := len(sizes())
		if sizes()[n-1] == "40x120" {
			break
		}
		if i == 100 {
			t.Fatalf("size never changed: %v", sizes())
		}
		if _, err := io.WriteString(stdinW, "\n"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "another stty size; output %q", func() bool { return len(sizes()) > n }, output)
	}
	if _, err := io.WriteString(stdinW, "q\n"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.code != 3 {
		t.Errorf("tty exec = %d %v; output %q", res.code, res.err, out.String())
	}
}

func TestStop(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	e.start("stop1", "/sbin/init")
	waitFor(t, "booted", e.logContains("stop1", "booted"))
	exits, err := e.rt.Watch("stop1")
	if err != nil {
		t.Fatal(err)
	}
	// busybox init powers off on SIGUSR2: shutdown actions, then
	// reboot(2), which in a child pid namespace kills its init with SIGINT.
	if err := e.rt.Stop(ctx, "stop1", unix.SIGUSR2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ex := receive(t, exits)
	if ex.Err != nil || ex.Status != 128+int(unix.SIGINT) || ex.Signal != "SIGINT" || ex.Time.IsZero() {
		t.Errorf("exit = %+v, want SIGINT (130)", ex)
	}
	if !e.logContains("stop1", "bye")() {
		b, _ := os.ReadFile(e.rt.LogPath("stop1"))
		t.Errorf("no bye in the log:\n%s", b)
	}
	if st, _, err := e.rt.State(ctx, "stop1"); err != nil || (st != StatusStopped && st != StatusUnknown) {
		t.Errorf("state after stop = %q %v", st, err)
	}
	if err := e.rt.Delete(ctx, "stop1"); err != nil {
		t.Fatal(err)
	}
	e.checkGone("stop1")
	if err := e.rt.Delete(ctx, "stop1"); err != nil {
		t.Errorf("second delete: %v", err)
	}
}

// checkGone checks that nothing of container id is left.
func (e *testEnv) checkGone(id string) {
	e.t.Helper()
	if st, _, err := e.rt.State(context.Background(), id); err != nil || st != StatusUnknown {
		e.t.Errorf("runc still knows %s: %q %v", id, st, err)
	}
	if _, err := os.Stat(e.rt.dir(id)); !errors.Is(err, os.ErrNotExist) {
		e.t.Errorf("state directory of %s: %v", id, err)
	}
	for _, d := range cgroupDirs(filepath.Join(e.cgroups, id)) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			e.t.Errorf("cgroup %s left: %v", d, err)
		}
	}
}

func TestStopKillsAfterTimeout(t *testing.T) {
	e := newTestEnv(t)
	// A pid namespace's init without a handler never gets SIGTERM.
	e.start("stubborn", "/bin/sleep", "1000")
	exits, err := e.rt.Watch("stubborn")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Stop(context.Background(), "stubborn", unix.SIGTERM, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if ex := receive(t, exits); ex.Status != 137 || ex.Signal != "SIGKILL" {
		t.Errorf("exit = %+v, want SIGKILL", ex)
	}
}

func TestWatchAfterRestart(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	p := e.start("rs1", "/bin/sleep", "1000")
	// The shim shrugs off everything but SIGKILL: were it to die, no exit
	// would be recorded below.
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGPIPE} {
		if err := unix.Kill(p.ShimPid, sig); err != nil {
			t.Fatal(err)
		}
	}

	// A restarted daemon has a new Runtime and no memory of the shim.
	rt2, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	exits, err := rt2.Watch("rs1")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt2.Kill(ctx, "rs1"); err != nil {
		t.Fatal(err)
	}
	if ex := receive(t, exits); ex.Err != nil || ex.Status != 137 || ex.Signal != "SIGKILL" {
		t.Errorf("exit = %+v, want SIGKILL", ex)
	}
	if err := rt2.Kill(ctx, "rs1"); err != nil {
		t.Errorf("kill of a stopped container: %v", err)
	}

	// The shim is gone now: the recorded exit comes at once.
	exits, err = rt2.Watch("rs1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-exits:
		if ex.Status != 137 {
			t.Errorf("recorded exit = %+v", ex)
		}
	default:
		t.Fatal("exit of a gone shim not delivered at once")
	}

	// Without a record the exit is unknown.
	os.Remove(filepath.Join(rt2.dir("rs1"), shim.ExitFile))
	exits, _ = rt2.Watch("rs1")
	if ex := receive(t, exits); ex.Status != -1 || ex.Err == nil {
		t.Errorf("exit without record = %+v", ex)
	}
	if _, err := rt2.Watch("nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("watch of an unknown container: %v", err)
	}
}

func TestStartFailure(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	_, err := e.rt.Start(ctx, "bad1", e.bundle("bad1", "/no/such/init"), StartOptions{})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("start error = %v, want runc's message", err)
	}
	if st, _, err := e.rt.State(ctx, "bad1"); err != nil || st != StatusUnknown {
		t.Errorf("runc kept the container: %q %v", st, err)
	}
	b, err := os.ReadFile(filepath.Join(e.rt.dir("bad1"), shim.ShimPidFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	exits, err := e.rt.Watch("bad1")
	if err != nil {
		t.Fatal(err)
	}
	if ex := receive(t, exits); ex.Err == nil {
		t.Errorf("failed start recorded an exit: %+v", ex)
	}
	// Watch returned: the shim has exited. Make sure it is not lingering.
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd), "bad1") {
		t.Errorf("shim %d still running", pid)
	}
	if err := e.rt.Delete(ctx, "bad1"); err != nil {
		t.Fatal(err)
	}
	e.checkGone("bad1")

	// A second start with the same id while the first runs is refused.
	e.start("dup", "/bin/sleep", "1000")
	if _, err := e.rt.Start(ctx, "dup", e.bundle("dup", "/bin/sleep", "1"), StartOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate start: %v", err)
	}
}

func TestDeleteRunning(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	e.start("del1", "/sbin/init")
	if err := e.rt.Delete(ctx, "del1"); err != nil {
		t.Fatal(err)
	}
	e.checkGone("del1")
	if err := e.rt.Signal(ctx, "del1", syscall.SIGTERM); !errors.Is(err, ErrNotFound) {
		t.Errorf("signal to a deleted container: %v", err)
	}
}

func TestConsoleLogRotation(t *testing.T) {
	e := newTestEnv(t)
	logPath := filepath.Join(e.dir, "logs", "chatty.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := e.bundle("chatty", "/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; exit 4")
	exitsBefore := func() <-chan Exit {
		if _, err := e.rt.Start(context.Background(), "chatty", bundle, StartOptions{LogPath: logPath, LogMax: 4096}); err != nil {
			t.Fatal(err)
		}
		ch, err := e.rt.Watch("chatty")
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}()
	if ex := receive(t, exitsBefore); ex.Status != 4 || ex.Signal != "" {
		t.Errorf("exit = %+v, want status 4", ex)
	}
	if got := e.rt.LogPath("chatty"); got != logPath {
		t.Errorf("LogPath = %q, want %q", got, logPath)
	}
	cur, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(logPath + ".1")
	if err != nil {
		t.Fatal(err)
	}
	// One write may hold many lines: the current file may even be empty.
	all := string(old) + string(cur)
	if !strings.HasSuffix(all, "line 1999\n") || len(old) < 4096 || len(cur) >= 4096 {
		t.Errorf("log %d bytes, old %d bytes, ending %q", len(cur), len(old), all[max(0, len(all)-20):])
	}
}

func TestRestoreFailure(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	bundle := e.bundle("rf", "/bin/sleep", "1000")
	if _, err := e.rt.Start(ctx, "rf", bundle, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	exits, err := e.rt.Watch("rf")
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(e.dir, "ckpt")
	if err := e.rt.Checkpoint(ctx, "rf", CheckpointOptions{ImagePath: images}); err != nil {
		t.Fatal(err)
	}
	receive(t, exits)
	// Without its process tree the image is unusable: CRIU fails and the
	// error quotes its log.
	if err := os.Remove(filepath.Join(images, "pstree.img")); err != nil {
		t.Fatal(err)
	}
	_, err = e.rt.Restore(ctx, "rf", bundle, RestoreOptions{ImagePath: images})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "criu log") {
		t.Fatalf("restore error = %v, want CRIU's log in it", err)
	}
	t.Logf("restore error (expected): %v", err)
	if !strings.Contains(err.Error(), "No pstree.img image") {
		t.Errorf("restore error lacks the cause from CRIU's log: %v", err)
	}
	if st, _, err := e.rt.State(ctx, "rf"); err != nil || st != StatusUnknown {
		t.Errorf("failed restore left %q %v", st, err)
	}
	if err := e.rt.Delete(ctx, "rf"); err != nil {
		t.Fatal(err)
	}
	e.checkGone("rf")
}

// TestStartAfterKilledRestore starts a container whose id a killed `runc
// restore` left behind: a directory in runc's root without a state file,
// with the root filesystem still mounted on criu-root.
func TestStartAfterKilledRestore(t *testing.T) {
	e := newTestEnv(t)
	id := "debris-" + randHex(3)
	criuRoot := filepath.Join(e.cfg.Root, id, "criu-root")
	if err := os.MkdirAll(criuRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(e.rootfs, criuRoot, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(criuRoot, unix.MNT_DETACH) })

	p := e.start(id, "sleep", "60")
	if p.InitPid <= 0 {
		t.Fatalf("start after the debris: %+v", p)
	}
	if _, err := os.Stat(criuRoot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("criu-root is still there: %v", err)
	}
	if mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(criuRoot)); err != nil || len(mounts) > 0 {
		t.Errorf("criu-root still mounted (%d, %v)", len(mounts), err)
	}
	if _, err := os.Stat(filepath.Join(e.rootfs, "bin")); err != nil {
		t.Errorf("the root filesystem lost files: %v", err)
	}

	// Something unexpected in the directory stays, and says so.
	id2 := "debris-" + randHex(3)
	if err := os.MkdirAll(filepath.Join(e.cfg.Root, id2), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.cfg.Root, id2, "note"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Start(context.Background(), id2, e.bundle(id2, "true"), StartOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("start over a non-empty leftover: %v, want ErrExists", err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Root, id2, "note")); err != nil {
		t.Errorf("the leftover's file went: %v", err)
	}
	os.RemoveAll(filepath.Join(e.cfg.Root, id2))
}
