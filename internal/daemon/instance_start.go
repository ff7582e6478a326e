package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// Starting an instance is two steps: prepareRun does everything a start
// needs before processes exist (network, cgroup and limits, bundle), and
// launchPrepared creates them (a fresh start, or a CRIU restore), watches
// them and commits the running state. A live migration's target prepares
// before the source freezes, so none of the preparation is frozen time.
//
// Crash safety: the state is committed after the processes exist. A daemon
// that dies in between finds, at its next start, processes the runtime
// knows and a record that says stopped: reconcile adopts them (the
// network is there, prepared before the launch).

// startLocked starts a stopped instance; the caller holds its lock.
func (d *Daemon) startLocked(ctx context.Context, inst *instance) error {
	if isVM(inst) {
		return d.startVM(ctx, inst)
	}
	return d.runLocked(ctx, inst, false, func(bundle, logPath string) (runtime.Process, error) {
		return d.rt.Start(ctx, inst.name, bundle, runtime.StartOptions{LogPath: logPath})
	})
}

// launchFunc creates an instance's processes from its bundle: a fresh
// start, or a CRIU restore.
type launchFunc func(bundle, logPath string) (runtime.Process, error)

// runLocked makes a stopped instance run: prepareRun, then launch.
func (d *Daemon) runLocked(ctx context.Context, inst *instance, netLock bool, launch launchFunc) error {
	p, err := d.prepareRun(ctx, inst, netLock)
	if err != nil {
		return err
	}
	return d.launchPrepared(ctx, p, launch, nil)
}

// prepared is an instance ready to launch: network attached, bundle
// written. abort undoes it.
type prepared struct {
	inst    *instance
	bundle  string
	logPath string
	netLock bool
	// linkUp: hostLinkUp brought the network-locked link up;
	// rootMounted: a migration target mounted the rootfs early.
	linkUp, rootMounted bool
	// limitsLater: the caller ends the start's CPU boost (applyLimits)
	// after launchPrepared, once the move is answered: a migration
	// target, whose source waits frozen for "resumed". The limits are
	// in place since prepareRun; a daemon that dies first has reconcile
	// write them again.
	limitsLater bool
	userns      *usernsRun        // an unprivileged container's (nil: privileged)
	config      map[string]string // the instance's configuration (limits)
	r           *revert.Reverter
}

func (p *prepared) abort() { p.r.Fail() }

// prepareRun does everything a start needs before processes exist. With
// netLock the container's link stays down until launchPrepared is done (a
// restore: no packet reaches half-restored sockets).
func (d *Daemon) prepareRun(ctx context.Context, inst *instance, netLock bool) (_ *prepared, err error) {
	if inst.live() != nil {
		return nil, errorf(ErrConflict, "instance %q is already running", inst.name)
	}
	rec := inst.record()
	name := inst.name
	p := &prepared{inst: inst, netLock: netLock, config: rec.Config, r: revert.New(),
		bundle: d.cfg.bundleDir(name), logPath: d.cfg.logPath(name)}
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	bg := context.WithoutCancel(ctx)
	ep, err := d.net.Attach(ctx, name, rec.Address)
	if err != nil {
		return nil, errorf(ErrConflict, "network: %w", err)
	}
	p.r.Add(func() { d.undo("detach network", name, d.net.Detach(bg, name)) })
	if netLock {
		if err := d.net.SetHostLink(name, false); err != nil {
			return nil, err
		}
	}
	// The container's cgroup gets its limits before runc puts a process in
	// it (a start's init, a restore's tasks), with a boosted CPU weight
	// until it runs (startCPUWeight): the container's side of starting
	// (runc's init: namespaces, mounts, seccomp) is control work, and must
	// not queue behind busy neighbours while the host fills up.
	p.r.Add(func() { d.destroyCgroup(name) })
	if err := d.applyLimits(ctx, name, rec.Config, d.startCPUWeight()); err != nil {
		return nil, fmt.Errorf("limits of %s: %w", name, err)
	}
	opts := runtime.SpecOptions{
		ID:          name,
		Hostname:    name,
		Rootfs:      d.storage.Path(containerVolume(name)),
		Args:        rec.Init,
		Env:         append(append([]string{}, rec.Env...), "container=vessel"),
		Cwd:         rec.Cwd,
		Netns:       ep.Netns,
		CgroupsPath: d.cfg.cgroupPath(name),
		EmptyDir:    d.cfg.emptyDir(),
	}
	u, err := d.prepareUserns(inst, p.r)
	if err != nil {
		return nil, err
	}
	if u != nil {
		opts.Rootfs, opts.IDMap, opts.Sysfs = u.rootfs, u.idmap, u.sysfs
		p.userns = u
	}
	spec, err := runtime.GenerateSpec(opts)
	if err != nil {
		return nil, err
	}
	if err := runtime.WriteBundle(p.bundle, spec); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p.logPath), 0o700); err != nil {
		return nil, err
	}
	return p, nil
}

// prepareDirectRestore readies the restore of a prepared instance from
// images and a root filesystem that need not be final yet
// (runtime.PrepareRestore: the shim and `criu swrk` started, CRIU in the
// container's cgroups, the request built), so that launchPrepared with
// the Restorer's Run holds CRIU's restore and little else: a move's target
// prepares before the source freezes, a snapshot's restore beside the
// disk's rollback. p's abort ends it.
func (d *Daemon) prepareDirectRestore(ctx context.Context, p *prepared, o runtime.RestoreOptions) (runtime.Restorer, error) {
	o.LogPath = p.logPath
	rst, err := d.rt.PrepareRestore(ctx, p.inst.name, p.bundle, o)
	if err != nil {
		return nil, fmt.Errorf("prepare the restore: %w", err)
	}
	p.r.Add(rst.Abort)
	return rst, nil
}

// launchPrepared creates the processes, watches them and commits the
// running state, with whatever also writes in the same transaction (a
// migration target's journal goes with it). A failure undoes the
// preparation too.
func (d *Daemon) launchPrepared(ctx context.Context, p *prepared, launch launchFunc, also func(*state.Tx) error) (err error) {
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	bg := context.WithoutCancel(ctx)
	name := p.inst.name
	t0 := time.Now()
	lap := func(what string) { d.log.Debug("launch "+what, "name", name, "after", time.Since(t0)) }
	if p.userns != nil && !p.rootMounted {
		if err := d.mountRootfs(name, p.userns); err != nil {
			return err
		}
	}
	proc, err := launch(p.bundle, p.logPath)
	if err != nil {
		return err
	}
	p.r.Add(func() {
		d.undo("kill", name, d.rt.Kill(bg, name))
		d.undo("delete runtime state", name, d.rt.Delete(bg, name))
	})
	// A restored container runs from here: its link comes up first (the
	// network's downtime ends here; a direct restore did it as CRIU
	// returned), the bookkeeping after.
	if err := d.hostLinkUp(p); err != nil {
		return err
	}
	d.crashAt(faultStartLaunched)
	lap("launched")
	// It runs: the container's own weight from now on.
	if !p.limitsLater {
		if err := d.applyLimits(ctx, name, p.config, 0); err != nil {
			return fmt.Errorf("limits of %s: %w", name, err)
		}
	}
	lap("limits")
	run, err := d.track(p.inst, proc)
	if err != nil {
		return err
	}
	lap("tracked")
	p.r.Add(func() { p.inst.clearLive(run) })
	osr := d.refreshOS(name)
	lap("os read")
	err = d.setState(p.inst, state.StateRunning, func(tx *state.Tx, rec *state.Instance) error {
		rec.LastStart = time.Now().UTC()
		if osr.ID != "" {
			rec.OS = osr
		}
		if also != nil {
			return also(tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the start of %s: %w", name, err)
	}
	lap("recorded")
	p.r.Success()
	return nil
}

// hostLinkUp brings a network-locked container's link up and announces
// its address, once. A live move's restore calls it as soon as CRIU has
// resumed the tasks (runtime.RestoreOptions.Resumed), launchPrepared
// otherwise; a failure after it takes the link down with the rest
// (prepareRun's revert detaches the network).
func (d *Daemon) hostLinkUp(p *prepared) error {
	if !p.netLock || p.linkUp {
		return nil
	}
	if err := d.net.SetHostLink(p.inst.name, true); err != nil {
		return err
	}
	p.linkUp = true
	d.announceInBackground(p.inst.name)
	return nil
}

// track registers an instance's processes and starts watching for their
// exit.
func (d *Daemon) track(inst *instance, proc runtime.Process) (*running, error) {
	ch, err := d.rt.Watch(inst.name)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", inst.name, err)
	}
	run := &running{proc: proc, exited: make(chan struct{})}
	inst.setLive(run)
	go func() {
		run.exit = <-ch
		close(run.exited)
		d.onExit(inst, run)
	}()
	return run, nil
}

// undo logs the failure of one step of undoing failed work: the step's
// own error must not hide the failure that caused the undo, but it must
// not vanish either.
func (d *Daemon) undo(what, name string, err error) {
	if err != nil {
		d.log.Error("undo after a failure: "+what, "name", name, "err", err)
	}
}

// destroyCgroup removes an instance's cgroup, logging a failure.
func (d *Daemon) destroyCgroup(name string) {
	cg, err := d.instanceCgroup(name)
	if err == nil {
		err = cg.Destroy()
	}
	d.undo("remove cgroup", name, err)
}
