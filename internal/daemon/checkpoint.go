package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/runtime"
)

// criuOptions are the CRIU options of every checkpoint and restore of a
// vessel container. CRIU's network lock (iptables rules around the dump,
// and again around the restore, which follows the dump's method) costs
// ~150 ms of frozen time; vessel locks the network itself where it matters
// (a live migration takes the container's host veth down, see
// network.Manager.SetHostLink).
var criuOptions = []string{"network-lock skip"}

// setupCRIUConfig writes criuOptions to RUN/criu.conf and points
// CRIU_CONFIG_FILE at it, so every CRIU that runc and the shims start
// (they inherit the daemon's environment) reads it. Not runc's
// per-container "org.criu.config": CRIU 4.1.1 crashes parsing
// --network-lock from an RPC configuration file (it reads argv[optind]
// with a NULL argv); the environment's file is parsed with the real
// command line. It also makes RUN/empty, the empty directory masked
// directories are bind mounts of (see runtime.SpecOptions.EmptyDir).
func (d *Daemon) setupCRIUConfig() error {
	if err := os.MkdirAll(d.cfg.emptyDir(), 0o555); err != nil {
		return err
	}
	path := filepath.Join(d.cfg.RunDir, "criu.conf")
	if err := runtime.WriteCRIUConfig(path, criuOptions...); err != nil {
		return err
	}
	return os.Setenv("CRIU_CONFIG_FILE", path)
}

// A checkpoint of a running instance, for a stateful snapshot or a live
// migration, is one runtime.Checkpoint session: newCheckpoint prepares it
// while the container runs (CRIU started, its request built, the page
// FIFOs or the page server ready), the caller freezes the container
// (freezer) and runs the dump (Run) in the frozen window, and a failure
// anywhere ends it with Abort, after which the container only needs a
// thaw. What the two callers differ in is where the pages go: a
// snapshot's into its checkpoint volume (an O_DIRECT imgstream.DirSink),
// a copy-mode migration's to the target as CRIU writes them, a post-copy
// migration's nowhere yet (a page server holds them).

// newCheckpoint prepares a leave-running checkpoint of an instance.
func (d *Daemon) newCheckpoint(ctx context.Context, name string, o runtime.CheckpointOptions) (*runtime.Checkpoint, error) {
	o.LeaveRunning = true
	// Memory a pre-copy move is still copying in would be missed.
	if err := d.awaitMemoryLoad(ctx, name); err != nil {
		return nil, err
	}
	ck, err := d.rt.NewCheckpoint(ctx, name, o)
	if err != nil {
		return nil, fmt.Errorf("prepare the checkpoint of %s: %w", name, err)
	}
	return ck, nil
}

// awaitMemoryLoad waits until a pre-copy move to this host has copied all
// of name's memory in (the restore's lazy-pages daemon is done with the
// images and the work directory).
func (d *Daemon) awaitMemoryLoad(ctx context.Context, name string) error {
	if ch, ok := d.memLoads.Load(name); ok {
		select {
		case <-ch.(chan struct{}):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// checkDumpable refuses, before anything is frozen, a checkpoint CRIU
// could not restore (runtime.CheckDumpable: a process outside init's time
// namespace, say one `vessel exec` started after a restore).
func (d *Daemon) checkDumpable(name string) error {
	inst, err := d.instance(name)
	if err != nil {
		return err
	}
	run := inst.live()
	if run == nil {
		return nil
	}
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return err
	}
	pids, err := cg.Pids()
	if err != nil {
		return err
	}
	if err := runtime.CheckDumpable(run.proc.InitPid, pids); err != nil {
		if errors.Is(err, runtime.ErrNotDumpable) {
			return errorf(ErrConflict, "instance %q cannot be checkpointed: %w", name, err)
		}
		return err
	}
	return nil
}

// freezer freezes an instance's cgroup and remembers whether it did, so
// the cleanup of a failure thaws exactly what was frozen.
type freezer struct {
	d      *Daemon
	name   string
	frozen bool
	since  time.Time
}

// freeze freezes the cgroup (and waits until every task is frozen).
func (f *freezer) freeze(ctx context.Context) error {
	cg, err := f.d.instanceCgroup(f.name)
	if err != nil {
		return err
	}
	if err := cg.Freeze(ctx); err != nil {
		return err
	}
	f.frozen, f.since = true, time.Now()
	return nil
}

// thaw thaws the cgroup if freeze froze it, and returns how long it was
// frozen.
func (f *freezer) thaw() (time.Duration, error) {
	if !f.frozen {
		return 0, nil
	}
	f.frozen = false
	took := time.Since(f.since)
	cg, err := f.d.instanceCgroup(f.name)
	if err == nil {
		err = cg.Thaw()
	}
	if err != nil {
		f.d.log.Error("thaw", "name", f.name, "err", err)
	}
	return took, err
}

// forget says the cgroup is no longer the freezer's to thaw (the
// container is gone, or left frozen on purpose).
func (f *freezer) forget() { f.frozen = false }
