package image

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// debootstrapOptions are the options of one debootstrap run.
type debootstrapOptions struct {
	Suite   string
	Mirror  string
	Variant string
	Include []string
	// Target is the directory to install into; debootstrap creates it.
	Target string
}

func (o debootstrapOptions) args() []string {
	args := []string{"--variant=" + o.Variant}
	if len(o.Include) > 0 {
		args = append(args, "--include="+strings.Join(o.Include, ","))
	}
	return append(args, o.Suite, o.Target, o.Mirror)
}

// runDebootstrap runs debootstrap, passing every line it prints (stdout and
// stderr) to progress, which may be nil. It runs under `unshare --mount` in
// a private mount namespace, so the mounts it makes in the target (proc,
// sys, devpts) go away with it even when it fails or is killed; and in its
// own process group, which a cancelled ctx kills whole.
func runDebootstrap(ctx context.Context, o debootstrapOptions, progress func(string)) error {
	args := append([]string{"--mount", "--propagation", "private", "--", "debootstrap"}, o.args()...)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	out := &lineWriter{fn: progress}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.flush()
	if err != nil {
		return toolError("debootstrap", err, out.tail.String())
	}
	return nil
}

// lineWriter splits what is written to it into lines, hands each to fn (if
// set) and keeps the last ones for error messages.
type lineWriter struct {
	mu      sync.Mutex
	fn      func(string)
	partial []byte
	tail    tailBuffer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.tail.Write(p) // a bounded in-memory tail: it cannot fail
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// flush hands on a last line without a newline.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.emit(string(l.partial))
		l.partial = nil
	}
}

func (l *lineWriter) emit(line string) {
	if line = strings.TrimRight(line, "\r"); l.fn != nil && line != "" {
		l.fn(line)
	}
}
