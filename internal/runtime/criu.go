package runtime

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gorunc "github.com/containerd/go-runc"
)

// CheckpointOptions configure a checkpoint.
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
}

// Checkpoint dumps the running container with CRIU: directly (see
// PrepareCheckpoint), or through `runc checkpoint` when runc's state is not
// one a direct dump understands. On failure the error carries the error
// lines of CRIU's log.
func (r *Runtime) Checkpoint(ctx context.Context, id string, o CheckpointOptions) error {
	pc, err := r.PrepareCheckpoint(id, o)
	if err != nil {
		return err
	}
	defer pc.Close()
	return pc.Run()
}

// checkCheckpoint validates a checkpoint's options and creates its
// directories (the work path defaults to the image path).
func (r *Runtime) checkCheckpoint(id string, o *CheckpointOptions) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if r.cfg.Criu == "" {
		return fmt.Errorf("checkpoint %s: %w", id, ErrNoCRIU)
	}
	if !filepath.IsAbs(o.ImagePath) || (o.WorkPath != "" && !filepath.IsAbs(o.WorkPath)) {
		return fmt.Errorf("%w: checkpoint needs absolute image and work paths", ErrInvalid)
	}
	if o.WorkPath == "" {
		o.WorkPath = o.ImagePath
	}
	for _, d := range []string{o.ImagePath, o.WorkPath} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
	}
	return nil
}

// runcCheckpoint dumps with `runc checkpoint` (options already checked).
// It runs without a context: killing runc would orphan its CRIU.
func (r *Runtime) runcCheckpoint(id string, o CheckpointOptions) error {
	opts := &gorunc.CheckpointOpts{
		ImagePath:      o.ImagePath,
		WorkDir:        o.WorkPath,
		AllowOpenTCP:   o.TCPEstablished,
		LazyPages:      o.LazyPages,
		CriuPageServer: o.PageServer,
		StatusFile:     o.StatusFile,
	}
	var actions []gorunc.CheckpointAction
	if o.LeaveRunning {
		actions = append(actions, gorunc.LeaveRunning)
	}
	if err := r.criuRunc().Checkpoint(context.Background(), id, opts, actions...); err != nil {
		err = runcError("checkpoint", id, err, ErrCheckpoint)
		return fmt.Errorf("%w%s", err, criuLogErrors(filepath.Join(o.WorkPath, "dump.log")))
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

// criuTailLines is how many last lines of a CRIU log an error quotes.
const criuTailLines = 5

// criuLogErrors returns the error lines of a CRIU log and its last lines,
// formatted to be appended to an error message, or "" without a log.
//
// Not every "Error" line is fatal: without CAP_SYS_RESOURCE every run logs
// "Error (criu/util.c:...): rlimit: Can't setup RLIMIT_NOFILE for self" and
// carries on. And not every fatal condition says "Error" (a missing
// pstree.img only logs "No pstree.img image" before CRIU gives up), so the
// last lines are quoted too.
func criuLogErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	var tail []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.Contains(l, "Error") {
			lines = append(lines, l)
		}
		if tail = append(tail, l); len(tail) > criuTailLines {
			tail = tail[1:]
		}
	}
	for _, l := range tail {
		if !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf("\ncriu log %s (errors, then its end):\n%s", path, strings.Join(lines, "\n"))
}
