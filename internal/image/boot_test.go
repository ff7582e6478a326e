package image

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// bootScript runs as PID 1 of the new namespaces, then execs the image's
// init. /proc/sys is made read-only so the image's boot scripts cannot
// change the host's sysctls, and the image's /dev/console (if any) is
// pointed at /dev/null so sysvinit does not write to the host's console.
const bootScript = `set -e
mount --bind "$1/proc/sys" "$1/proc/sys"
mount -o remount,bind,ro "$1/proc/sys"
if [ -e "$1/dev/console" ]; then mount --bind /dev/null "$1/dev/console"; fi
exec chroot "$1" /sbin/init
`

// bootedInit is an image's init running as PID 1 of its own PID namespace.
type bootedInit struct {
	cmd    *exec.Cmd
	pid    int // init's PID on the host
	stdout *testutil.SyncBuffer
}

// bootInit starts rootfs's /sbin/init in new PID, mount, UTS, IPC and
// network namespaces, like a container without its cgroups and seccomp.
// ctx bounds the whole run.
func bootInit(ctx context.Context, t *testing.T, rootfs string) *bootedInit {
	t.Helper()
	cmd := exec.CommandContext(ctx, "unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net",
		"--mount-proc="+filepath.Join(rootfs, "proc"), "--", "/bin/sh", "-c", bootScript, "sh", rootfs)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"}
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &bootedInit{cmd: cmd, stdout: out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // killed: its status says nothing
		}
	})
	waitUntil(ctx, t, "init started", func() bool {
		b.pid = childOf(cmd.Process.Pid)
		return b.pid != 0
	})
	return b
}

// stop sends init the signal named sig (a Metadata.StopSignal) and waits for the namespace to end. An init that
// halts calls reboot(2), which in a PID namespace kills the namespace's
// init with SIGINT; unshare then dies of the same signal.
func (b *bootedInit) stop(t *testing.T, sig string) {
	t.Helper()
	num := unix.SignalNum(sig)
	if num == 0 {
		t.Fatalf("unknown stop signal %q", sig)
	}
	if err := syscall.Kill(b.pid, num); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait() // the status is read from ProcessState below
	ws, _ := b.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("init ended with %v, want death by SIGINT (reboot(2) in a PID namespace); output:\n%s",
			b.cmd.ProcessState, b.stdout.String())
	}
}

// childOf returns the PID of a child of pid, 0 if it has none.
func childOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command, which is in parentheses: state, ppid.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			return child
		}
	}
	return 0
}

// waitUntil polls cond until it holds; if ctx ends first, the test fails.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestBusyboxImageBootsAndStops(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t)
	md := buildBusybox(t, s)
	rootfs := unpack(t, s, md.Fingerprint)

	// The deadline only guards against a hang; nothing is timed.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pid1 := bootInit(ctx, t, rootfs)
	waitUntil(ctx, t, "the boot banner", func() bool {
		return strings.Contains(pid1.stdout.String(), "vessel: busybox booted")
	})
	pid1.stop(t, md.StopSignal)
	if out := pid1.stdout.String(); !strings.Contains(out, "shutting down") {
		t.Errorf("rcK did not run; output:\n%s", out)
	}
}
