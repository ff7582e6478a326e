package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/shim"
)

// StartOptions configure the shim of a container.
type StartOptions struct {
	// LogPath is the console log (init's stdout and stderr); empty means
	// StateDir/<id>/console.log, which Delete removes with the state
	// directory: a log meant to outlive the container belongs elsewhere.
	LogPath string
	// LogMax is the size in bytes at which the log is rotated to LogPath.1
	// (one old file is kept); 0 means 1 MiB.
	LogMax int64
}

// RestoreOptions configure restoring a container from a checkpoint.
type RestoreOptions struct {
	StartOptions
	// ImagePath holds the checkpoint images; WorkPath gets CRIU's
	// restore.log (default: ImagePath).
	ImagePath string
	WorkPath  string
	// LazyPages restores memory on demand from a lazy-pages daemon
	// (StartLazyPages) on WorkPath.
	LazyPages bool
	// TCPEstablished restores established TCP connections.
	TCPEstablished bool
	// DirectRead reads the memory pages with O_DIRECT where CRIU can
	// (DirectReadPages): for images on disk, not in the page cache.
	DirectRead bool
	// Hang is fault injection for tests: CRIU is never asked, the restore
	// waits for its context.
	Hang bool
	// IDMap is an unprivileged container's map: its restored tasks read
	// some images as the container's root, so ImagePath is shared with
	// that root's group (ShareImages). Untrusted images (a peer's) must
	// first pass CheckUserns.
	IDMap     *IDMap
	Untrusted bool
	// Resumed, if set, is called by a direct restore (PrepareRestore's
	// Run) as soon as CRIU has restored and resumed the tasks, before
	// runc's state is written and the shim takes init (3-5 ms): a caller
	// ends the network's downtime there. It runs on Run's goroutine.
	Resumed func()
}

// Start runs the container of bundle under a new shim and returns once it is
// running. The bundle's config.json must exist, and runc must not know the
// container (a stopped one is deleted first). If runc fails, the error
// carries runc's message, nothing is left in runc, the shim exits and the
// state directory keeps the console log until Delete.
func (r *Runtime) Start(ctx context.Context, id, bundle string, o StartOptions) (Process, error) {
	c, err := r.shimConfig(id, bundle, shim.ActionCreate, o)
	if err != nil {
		return Process{}, err
	}
	return r.launch(ctx, c)
}

// Restore brings a checkpointed container back under a new shim, like
// Start: a direct restore (PrepareRestore) run at once. The container's
// previous shim must have exited (see Watch).
func (r *Runtime) Restore(ctx context.Context, id, bundle string, o RestoreOptions) (Process, error) {
	p, err := r.prepareRestore(ctx, id, bundle, o)
	if err != nil {
		return Process{}, err
	}
	return p.Run(ctx)
}

func (r *Runtime) shimConfig(id, bundle string, action shim.Action, o StartOptions) (*shim.Config, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if !filepath.IsAbs(bundle) {
		return nil, fmt.Errorf("%w: bundle %q is not an absolute path", ErrInvalid, bundle)
	}
	logPath := o.LogPath
	if logPath == "" {
		logPath = filepath.Join(r.dir(id), shim.DefaultLogFile)
	}
	if !filepath.IsAbs(logPath) {
		return nil, fmt.Errorf("%w: log path %q is not absolute", ErrInvalid, logPath)
	}
	return &shim.Config{
		Version: shim.Version,
		Action:  action,
		ID:      id,
		Bundle:  bundle,
		Runc:    r.cfg.Runc,
		Root:    r.cfg.Root,
		LogPath: logPath,
		LogMax:  o.LogMax,
	}, nil
}

// launch prepares the state directory, starts the shim and waits for its
// report.
func (r *Runtime) launch(ctx context.Context, c *shim.Config) (Process, error) {
	cmd, reports, err := r.startShimFor(ctx, c)
	if err != nil {
		return Process{}, err
	}
	var res reportResult
	select {
	case res = <-reports:
	case <-ctx.Done():
		if c.Action == shim.ActionRestore {
			r.stopRestore(c.ID, cmd.Process.Pid, reports)
			return Process{}, fmt.Errorf("%w %s: restore stopped: %w", ErrStart, c.ID, ctx.Err())
		}
		go r.abandon(c.ID, reports)
		return Process{}, fmt.Errorf("%w %s: %w", ErrStart, c.ID, ctx.Err())
	}
	switch {
	case res.err != nil:
		return Process{}, fmt.Errorf("%w %s: %w", ErrStart, c.ID, res.err)
	case res.rep.Error != "":
		return Process{}, fmt.Errorf("%w %s: %s", ErrStart, c.ID, res.rep.Error)
	}
	r.moveShim(c.ID, cmd.Process.Pid)
	return Process{ShimPid: cmd.Process.Pid, InitPid: res.rep.InitPid}, nil
}

// startShimFor prepares the state directory of c's container, starts its
// shim with c (and extra as its fds 4, 5, ...) and returns the shim's
// reports.
func (r *Runtime) startShimFor(ctx context.Context, c *shim.Config, extra ...*os.File) (*exec.Cmd, <-chan reportResult, error) {
	if err := r.checkFree(ctx, c.ID); err != nil {
		return nil, nil, err
	}
	dir := r.dir(c.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create state directory: %w", err)
	}
	// Files of a previous run would confuse Watch.
	for _, f := range []string{shim.ExitFile, shim.ShimPidFile, shim.InitPidFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("clean state directory: %w", err)
		}
	}
	if err := shim.WriteConfig(dir, c); err != nil {
		return nil, nil, err
	}
	cmd, report, err := r.startShim(dir, extra...)
	if err != nil {
		return nil, nil, err
	}
	return cmd, readReport(report), nil
}

// moveShim moves a shim whose container runs into Config.ShimCgroup. It
// waits for the shim's report rather than moving it right after fork (with
// CLONE_INTO_CGROUP on v2, or a write to cgroup.procs on v1) on purpose:
// `runc run` is control work and keeps the caller's CPU weight. A failure
// costs only that placement, so it is logged, not returned.
func (r *Runtime) moveShim(id string, pid int) {
	if r.cfg.ShimCgroup == "" {
		return
	}
	cg, err := cgroups.New(r.cfg.ShimCgroup)
	if err == nil {
		err = cg.AddProc(pid)
	}
	if err != nil {
		r.cfg.Log.Warn("shim stays in the daemon's cgroup", "id", id, "pid", pid, "err", err)
	}
}

// checkFree fails with ErrExists when runc or a live shim has container id.
// runc knows a container by its state file: without one, there is no need
// to run `runc state` (an exec of a few ms on every start and restore).
func (r *Runtime) checkFree(ctx context.Context, id string) error {
	if shim.RuncHasState(r.cfg.Root, id) {
		st, _, err := r.State(ctx, id)
		if err != nil {
			return err
		}
		if st != StatusUnknown {
			return fmt.Errorf("%w: %s is %s", ErrExists, id, st)
		}
	} else if err := r.removeRuncDebris(id); err != nil {
		return err
	}
	if fd, err := r.openShim(id); err == nil {
		closeFd(fd)
		return fmt.Errorf("%w: the shim of %s is still running", ErrExists, id)
	}
	return nil
}

// removeRuncDebris removes what a killed `runc restore` leaves in its root
// without a state file: the container's directory and, mounted in it, the
// root filesystem CRIU restored into (criu-root). runc refuses the id while
// the directory exists ("container with given ID already exists").
func (r *Runtime) removeRuncDebris(id string) error {
	dir := filepath.Join(r.cfg.Root, id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	criuRoot := filepath.Join(dir, "criu-root")
	if err := unix.Unmount(criuRoot, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %s: unmount runc's leftover %s: %w", ErrExists, id, criuRoot, err)
	}
	// Not RemoveAll: only empty directories go, whatever is still in them
	// stays for an operator to look at.
	for _, d := range []string{criuRoot, dir} {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s: runc left %s behind: %w", ErrExists, id, dir, err)
		}
	}
	r.cfg.Log.Warn("removed what a killed runc left of a container", "id", id, "dir", dir)
	return nil
}

// startShim starts vessel-shim in its own session with /dev/null as stdio
// and the write end of the report pipe as fd 3; it returns the read end.
func (r *Runtime) startShim(dir string, extra ...*os.File) (*exec.Cmd, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer pw.Close()
	cmd := exec.Command(r.cfg.Shim, filepath.Join(dir, shim.ConfigFile))
	cmd.Dir = "/" // hold no daemon directory busy
	cmd.Env = shimEnv()
	cmd.ExtraFiles = append([]*os.File{pw}, extra...) // fd 3 = shim.ReportFd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		return nil, nil, fmt.Errorf("%w: start shim: %w", ErrStart, err)
	}
	// Reap the shim when it ends. After a daemon restart the shim is no
	// longer our child and whoever inherited it reaps it.
	go cmd.Wait() //nolint:errcheck // exit status is in exit.json
	return cmd, pr, nil
}

// shimEnv is our environment without NOTIFY_SOCKET, which makes runc talk to
// systemd.
func shimEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return env
}

type reportResult struct {
	rep shim.Report
	err error
}

// readReport reads the shim's reports from f in the background (a direct
// restore's shim sends two, see shim.Report) and closes f; the end of the
// pipe comes as a last result with an error.
func readReport(f *os.File) <-chan reportResult {
	ch := make(chan reportResult, 3)
	go func() {
		defer f.Close()
		dec := json.NewDecoder(f)
		for range 2 {
			var res reportResult
			if err := dec.Decode(&res.rep); err != nil {
				ch <- reportResult{err: fmt.Errorf("shim exited without a report (see its console log): %w", err)}
				return
			}
			ch <- res
		}
		ch <- reportResult{err: errors.New("shim reported too much")}
	}()
	return ch
}

// stopRestore ends a restore whose context ended (a deadline: CRIU or runc
// stuck). Unlike a start, waiting is no answer: the caller's container is
// frozen on another host until this one gives up. It kills the shim's
// process group (the shim, runc restore and its CRIU; the shim runs in its
// own session), then removes what runc made of the container. Tasks CRIU
// had already created are in the container's cgroup, which is the
// caller's to empty.
func (r *Runtime) stopRestore(id string, shimPid int, reports <-chan reportResult) {
	if err := syscall.Kill(-shimPid, syscall.SIGKILL); err != nil {
		r.cfg.Log.Warn("kill a stuck restore", "id", id, "shim", shimPid, "err", err)
	}
	select {
	case <-reports: // EOF once the shim is gone
	case <-time.After(10 * time.Second): // someone else holds the pipe
	}
	if shim.RuncHasState(r.cfg.Root, id) {
		_ = r.runc.Delete(context.Background(), id, &gorunc.DeleteOpts{Force: true})
	}
	if err := r.removeRuncDebris(id); err != nil {
		r.cfg.Log.Warn("clean up a stuck restore", "id", id, "err", err)
	}
}

// abandon cleans up after a Start whose context ended while runc was still
// running: killing the shim then would leave runc and maybe a container
// without a monitor, so it waits for the shim's report and force-deletes
// whatever was started. The shim then records the exit and ends.
func (r *Runtime) abandon(id string, reports <-chan reportResult) {
	if res := <-reports; res.err == nil && res.rep.Error == "" {
		r.runc.Delete(context.Background(), id, &gorunc.DeleteOpts{Force: true}) //nolint:errcheck // best effort
	}
}
