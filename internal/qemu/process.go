package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotRunning is a VM whose QEMU process is not there (any more).
var ErrNotRunning = errors.New("qemu is not running")

// Process is a VM's running QEMU, started by this daemon or an earlier
// one: vessel is not its parent (it daemonized), so it is watched through
// a pidfd, and its exit status is not known (the QMP SHUTDOWN event says
// why a guest stopped).
type Process struct {
	Pid  int
	fd   int
	done chan struct{}
}

// Start starts QEMU for cfg and returns once it runs detached: QEMU
// daemonizes itself (own session, stdio on /dev/null) after its devices
// are set up, its parent's exit status says whether that worked (with
// QEMU's own message on failure), and the pidfile names the daemon. The
// run directory is created; stale sockets in it are removed first.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	args, err := cfg.Args()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	for _, f := range []string{QMPSocketFile, EventsSocketFile, ConsoleSocketFile, AgentSocketFile, PidFile} {
		if err := os.Remove(filepath.Join(cfg.RunDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
	}
	// QEMU's stderr goes to a file, not a pipe: the daemonized child
	// holds it open until it is ready, and a reader of a pipe would wait
	// for that child rather than for the parent's exit.
	errPath := filepath.Join(cfg.RunDir, StderrFile)
	stderr, err := os.Create(errPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	defer stderr.Close()
	bin, args, err := cfg.command(args)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = nil
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.Dir = cfg.RunDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errPath)
		return nil, fmt.Errorf("start qemu for %s: %w: %s", cfg.Name, err, strings.TrimSpace(string(msg)))
	}
	p, err := Find(cfg.RunDir, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start qemu for %s: it daemonized but %w", cfg.Name, err)
	}
	return p, nil
}

// Find returns the live QEMU of VM name whose pidfile is in runDir, or
// ErrNotRunning. The process is recognised by its command line (QEMU with
// -name guest=NAME and this pidfile), checked after its pidfd is open, so
// a pid reused by another process is never mistaken for it.
func Find(runDir, name string) (*Process, error) {
	b, err := os.ReadFile(filepath.Join(runDir, PidFile))
	if err != nil {
		return nil, fmt.Errorf("%w: no pidfile: %w", ErrNotRunning, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("%w: bad pidfile %q", ErrNotRunning, b)
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("%w: pid %d: %w", ErrNotRunning, pid, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !isQEMUOf(cmdline, runDir, name) || pidfdExited(fd) {
		unix.Close(fd) //nolint:errcheck // nothing to do about it
		return nil, fmt.Errorf("%w: pid %d is not %s's qemu", ErrNotRunning, pid, name)
	}
	p := &Process{Pid: pid, fd: fd, done: make(chan struct{})}
	go p.watch()
	return p, nil
}

// isQEMUOf tells whether a /proc/PID/cmdline is QEMU's for VM name with
// its pidfile in runDir.
func isQEMUOf(cmdline []byte, runDir, name string) bool {
	args := strings.Split(string(bytes.TrimSuffix(cmdline, []byte{0})), "\x00")
	if len(args) == 0 || filepath.Base(args[0]) != Binary {
		return false
	}
	var nameOK, pidOK bool
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "-name":
			g, _, _ := strings.Cut(args[i], ",")
			nameOK = g == "guest="+name
		case "-pidfile":
			pidOK = args[i] == filepath.Join(runDir, PidFile)
		}
	}
	return nameOK && pidOK
}

// watch closes done when the process has ended.
func (p *Process) watch() {
	f := os.NewFile(uintptr(p.fd), "pidfd")
	defer close(p.done)
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Returning false makes the poller wait for the next readiness event
	// (a pidfd polls readable once its process has exited).
	_ = rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) })
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process, unless it has ended. It goes through
// the pidfd, so it cannot reach a process that reused the pid.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EBADF) {
		return nil // ended meanwhile
	}
	return err
}

// Kill sends SIGKILL and waits for the process's end (or ctx's).
func (p *Process) Kill(ctx context.Context) error {
	if err := p.Signal(unix.SIGKILL); err != nil {
		return fmt.Errorf("kill qemu %d: %w", p.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// ProbeDisk returns the disk options for an image file on this host:
// O_DIRECT where the file's filesystem takes it (not on tmpfs), and
// io_uring where the kernel allows it (io_uring_disabled), else Linux AIO
// with O_DIRECT, else threads.
func ProbeDisk(path string) Disk {
	d := Disk{Path: path, AIO: "threads"}
	if f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0); err == nil {
		f.Close()
		d.Direct = true
		d.AIO = "native"
	}
	if ioUringWorks() {
		d.AIO = "io_uring"
	}
	return d
}

// ioUringWorks sets up (and closes) a one-entry io_uring.
func ioUringWorks() bool {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return false
	}
	unix.Close(int(fd)) //nolint:errcheck // a probe
	return true
}
