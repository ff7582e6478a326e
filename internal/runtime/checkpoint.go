package runtime

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gorunc "github.com/containerd/go-runc"
)

// CheckpointOptions configure runc checkpoint.
type CheckpointOptions struct {
	// ImagePath receives the checkpoint images (created if missing).
	ImagePath string
	// WorkPath receives CRIU's dump.log (default: ImagePath).
	WorkPath string
	// LeaveRunning keeps the container running after the dump; otherwise
	// it is killed and runc forgets it (its shim records the exit).
	LeaveRunning bool
	// TCPEstablished dumps established TCP connections.
	TCPEstablished bool
	// LazyPages leaves memory pages to be served on demand, from
	// PageServer (addr:port) if set.
	LazyPages  bool
	PageServer string
	// StatusFile, with LazyPages, gets a '\0' from CRIU when the lazy-pages
	// server is ready.
	StatusFile *os.File
	// ExtraArgs are appended to runc checkpoint's options.
	ExtraArgs []string
}

// Checkpoint dumps the running container with CRIU (runc checkpoint). On
// failure the error carries runc's output and the error lines of CRIU's log.
func (r *Runtime) Checkpoint(ctx context.Context, id string, o CheckpointOptions) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if r.cfg.Criu == "" {
		return fmt.Errorf("checkpoint %s: %w", id, ErrNoCRIU)
	}
	if !filepath.IsAbs(o.ImagePath) || (o.WorkPath != "" && !filepath.IsAbs(o.WorkPath)) {
		return fmt.Errorf("%w: checkpoint needs absolute image and work paths", ErrInvalid)
	}
	work := o.WorkPath
	if work == "" {
		work = o.ImagePath
	}
	for _, d := range []string{o.ImagePath, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
	}
	rc := r.criuRunc()
	opts := &gorunc.CheckpointOpts{
		ImagePath:      o.ImagePath,
		WorkDir:        o.WorkPath,
		AllowOpenTCP:   o.TCPEstablished,
		LazyPages:      o.LazyPages,
		CriuPageServer: o.PageServer,
		StatusFile:     o.StatusFile,
		ExtraArgs:      o.ExtraArgs,
	}
	var actions []gorunc.CheckpointAction
	if o.LeaveRunning {
		actions = append(actions, gorunc.LeaveRunning)
	}
	if err := rc.Checkpoint(ctx, id, opts, actions...); err != nil {
		err = runcError("checkpoint", id, err, ErrCheckpoint)
		return fmt.Errorf("%w%s", err, criuLogErrors(filepath.Join(work, "dump.log")))
	}
	return nil
}

// criuRunc is our runc client with --criu: go-runc no longer passes its
// Criu field, but runc 1.1 still takes the global flag.
func (r *Runtime) criuRunc() *gorunc.Runc {
	rc := *r.runc
	rc.ExtraArgs = append([]string{"--criu", r.cfg.Criu}, rc.ExtraArgs...)
	return &rc
}

// maxCriuLines bounds how much of CRIU's log goes into an error.
const maxCriuLines = 10

// criuLogErrors returns the last error lines of a CRIU log, formatted to be
// appended to an error message, or "" when there are none.
func criuLogErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "Error") || strings.Contains(l, "err=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	if len(lines) > maxCriuLines {
		lines = lines[len(lines)-maxCriuLines:]
	}
	return fmt.Sprintf("\ncriu log %s:\n%s", path, strings.Join(lines, "\n"))
}
