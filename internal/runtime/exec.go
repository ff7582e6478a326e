package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gorunc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/shim"
)

// ExecOptions describe a process to run in a container.
type ExecOptions struct {
	// Args is the command; it is required.
	Args []string
	// Env overrides and extends init's environment, by key.
	Env []string
	// Cwd defaults to init's.
	Cwd string
	// TTY runs the process on a terminal of its own, Width x Height
	// (default 80x24); Stderr is unused then.
	TTY           bool
	Width, Height uint16
	// Stdin feeds the process; nil means /dev/null. Without a TTY its EOF
	// reaches the process as EOF.
	Stdin io.Reader
	// Stdout and Stderr receive its output; nil discards it.
	Stdout, Stderr io.Writer
	// Resize changes the terminal size while the process runs (TTY only).
	Resize <-chan WinSize
}

// WinSize is a terminal size in character cells.
type WinSize struct {
	Width, Height uint16
}

// Exec runs a process in the running container id with init's user,
// capabilities, rlimits and environment, in the foreground (runc exec
// without --detach), and returns its exit code: a non-zero code is not an
// error, nor are runc's 126/127-style codes for a command that cannot be
// run. Errors mean the process could not be run at all.
//
// runc relays the process's output through pipes (or a pty) of its own and
// returns only when they reach EOF, so a background process that keeps the
// command's output open keeps Exec waiting, as it keeps "runc exec" waiting.
//
// When ctx ends, Exec SIGKILLs the process, then runc (which would wait for
// such background processes; they keep running in the container), and fails
// with ctx's error. Exec returns without waiting for Stdin: a copier blocked
// in Stdin.Read ends at its next read.
func (r *Runtime) Exec(ctx context.Context, id string, o ExecOptions) (int, error) {
	if !validID(id) || len(o.Args) == 0 {
		return -1, fmt.Errorf("%w: exec needs a container id and a command", ErrInvalid)
	}
	c, err := r.runc.State(ctx, id)
	if err != nil {
		return -1, runcError("exec in", id, err, ErrRunc)
	}
	if c.Status != string(StatusRunning) {
		return -1, fmt.Errorf("%w: exec in %s: it is %s", ErrNotRunning, id, c.Status)
	}
	base, err := readProcess(c.Bundle)
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	tmp, err := os.MkdirTemp(r.dir(id), "exec-")
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer os.RemoveAll(tmp)

	run := &execRun{
		runc:    r.execRunc(),
		id:      id,
		proc:    execProcess(base, o),
		pidFile: filepath.Join(tmp, "pid"),
		logFile: filepath.Join(tmp, "runc.log"),
		initPid: c.Pid,
	}
	var eio execIO
	if o.TTY {
		eio, err = newTTYIO(o)
	} else {
		eio, err = newPipeIO(o)
	}
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	code, err := run.wait(ctx, eio)
	if err != nil {
		return code, fmt.Errorf("exec in %s: %w", id, err)
	}
	return code, nil
}

// execRunc is our runc client writing JSON logs, so that runc's own errors
// can be told from the process's exit code.
func (r *Runtime) execRunc() *gorunc.Runc {
	rc := *r.runc
	rc.LogFormat = gorunc.JSON
	return &rc
}

// readProcess returns init's process from a bundle's config.json.
func readProcess(bundle string) (*specs.Process, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s/config.json: %w", bundle, err)
	}
	if s.Process == nil {
		return nil, fmt.Errorf("%s/config.json has no process", bundle)
	}
	return s.Process, nil
}

// execProcess is init's process (user, capabilities, rlimits, security
// settings) with the command, environment, directory and terminal of o.
func execProcess(base *specs.Process, o ExecOptions) specs.Process {
	p := *base
	p.Args = slices.Clone(o.Args)
	p.Env = mergeEnv(base.Env, o.Env)
	if o.Cwd != "" {
		p.Cwd = o.Cwd
	}
	p.Terminal = o.TTY
	p.ConsoleSize = nil
	if o.TTY {
		// runc 1.1 sizes the container's pty from the host terminal only
		// after the process has started; with consoleSize its init sizes it
		// before the exec, so the process never sees 0x0.
		w, h := termSize(o)
		p.ConsoleSize = &specs.Box{Width: uint(w), Height: uint(h)}
	}
	return p
}

// termSize is the initial terminal size of o, 80x24 by default.
func termSize(o ExecOptions) (width, height uint16) {
	if o.Width == 0 || o.Height == 0 {
		return 80, 24
	}
	return o.Width, o.Height
}

// mergeEnv returns base with the variables of over replacing or added to
// those of base.
func mergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		key, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(s string) bool { return strings.HasPrefix(s, key+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// execIO is the stdio of one runc exec: go-runc's IO plus the copying
// around it. go-runc calls CloseAfterStart once runc runs (we close our
// copies of runc's ends then); finish is called once runc has returned.
type execIO interface {
	gorunc.IO
	gorunc.StartCloser
	// finish copies what is left of the output and stops copying.
	finish()
}

// execRun is one runc exec in the foreground.
type execRun struct {
	runc    *gorunc.Runc
	id      string
	proc    specs.Process
	pidFile string
	logFile string
	initPid int
}

// wait runs runc exec and returns the process's exit code.
func (e *execRun) wait(ctx context.Context, eio execIO) (int, error) {
	started := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		// Not ctx: go-runc would SIGKILL runc and orphan the process.
		done <- e.runc.Exec(context.Background(), e.id, e.proc, &gorunc.ExecOpts{
			IO: eio, PidFile: e.pidFile, LogFile: e.logFile, Started: started,
		})
	}()
	runcFd := -1 // a pidfd on runc, to kill it without fear of pid reuse
	if pid, ok := <-started; ok {
		// runc has only just started; it cannot have exited and been
		// reaped yet, so the pid is still runc's.
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			runcFd = fd
			defer closeFd(fd)
		}
	}
	var err error
	cancelled := false
	select {
	case err = <-done:
	case <-ctx.Done():
		cancelled = true
		e.cancel(runcFd)
		err = <-done
	}
	eio.finish()
	eio.Close()
	if cancelled {
		return -1, ctx.Err()
	}
	return e.exitCode(err)
}

// exitCode tells the process's exit code from runc's own failure: runc
// exits non-zero for both, but logs an error only for its own.
func (e *execRun) exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var exit *gorunc.ExitError
	if !errors.As(err, &exit) {
		return -1, fmt.Errorf("%w: %w", ErrRunc, err)
	}
	if msg := shim.RuncLogErrors(e.logFile); msg != "" {
		if code, ok := startFailureCode(msg); ok {
			return code, nil
		}
		return -1, fmt.Errorf("%w: %s", ErrRunc, msg)
	}
	return exit.Status, nil
}

// startFailureCode maps runc's message for a command it could not execute
// to the shell's code: 127 not found, 126 not executable.
func startFailureCode(msg string) (int, bool) {
	// runc 1.1.5 exits 255 with e.g. "exec failed: unable to start
	// container process: exec: "/x": stat /x: no such file or directory".
	if !strings.Contains(msg, "unable to start container process: exec:") {
		return 0, false
	}
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "not found"):
		return 127, true
	case strings.Contains(msg, "permission denied"), strings.Contains(msg, "exec format error"):
		return 126, true
	}
	return 0, false
}

// cancel kills the exec'd process, if it has started, then runc.
func (e *execRun) cancel(runcFd int) {
	if pid, err := gorunc.ReadPidFile(e.pidFile); err == nil {
		killInNamespace(pid, e.initPid)
	}
	if runcFd >= 0 {
		unix.PidfdSendSignal(runcFd, unix.SIGKILL, nil, 0) //nolint:errcheck // it may just have exited
	}
}

// killInNamespace SIGKILLs pid through a pidfd if it is in init's pid
// namespace: the pid file may be stale and its pid reused.
func killInNamespace(pid, initPid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer closeFd(fd)
	ns, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	initNs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPid))
	if err1 == nil && err2 == nil && ns == initNs {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) //nolint:errcheck // it may just have exited
	}
}
