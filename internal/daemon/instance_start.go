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

// startLocked starts a stopped instance; the caller holds its lock.
func (d *Daemon) startLocked(ctx context.Context, name string) error {
	return d.runLocked(ctx, name, false, func(bundle, logPath string) (runtime.Process, error) {
		return d.rt.Start(ctx, name, bundle, runtime.StartOptions{LogPath: logPath})
	})
}

// launchFunc creates an instance's processes from its bundle: a fresh
// start, or a CRIU restore.
type launchFunc func(bundle, logPath string) (runtime.Process, error)

// runLocked makes a stopped instance run: prepareRun, then launch.
func (d *Daemon) runLocked(ctx context.Context, name string, netLock bool, launch launchFunc) error {
	p, err := d.prepareRun(ctx, name, netLock)
	if err != nil {
		return err
	}
	return d.launchPrepared(ctx, p, launch)
}

// prepared is an instance ready to launch: network attached, bundle
// written. abort undoes it.
type prepared struct {
	name    string
	bundle  string
	logPath string
	netLock bool
	config  map[string]string // the instance's configuration (limits)
	r       *revert.Reverter
}

func (p *prepared) abort() { p.r.Fail() }

// prepareRun does everything a start needs before processes exist. With
// netLock the container's link stays down until launchPrepared is done (a
// restore: no packet reaches half-restored sockets). A live migration's
// target prepares before the source freezes, so none of this counts as
// frozen time.
func (d *Daemon) prepareRun(ctx context.Context, name string, netLock bool) (_ *prepared, err error) {
	inst, err := d.getRecord(name)
	if err != nil {
		return nil, err
	}
	if d.liveOf(name) != nil {
		return nil, errorf(ErrConflict, "instance %q is already running", name)
	}
	p := &prepared{name: name, netLock: netLock, config: inst.Config, r: revert.New(),
		bundle: d.cfg.bundleDir(name), logPath: d.cfg.logPath(name)}
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	bg := context.WithoutCancel(ctx)
	ep, err := d.net.Attach(ctx, name, inst.Address)
	if err != nil {
		return nil, errorf(ErrConflict, "network: %w", err)
	}
	p.r.Add(func() { _ = d.net.Detach(bg, name) })
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
	p.r.Add(func() {
		if cg, err := d.instanceCgroup(name); err == nil {
			_ = cg.Destroy()
		}
	})
	if err := d.applyLimits(ctx, name, inst.Config, d.startCPUWeight()); err != nil {
		return nil, fmt.Errorf("limits of %s: %w", name, err)
	}
	spec, err := runtime.GenerateSpec(runtime.SpecOptions{
		ID:          name,
		Hostname:    name,
		Rootfs:      d.storage.Path(containerVolume(name)),
		Args:        inst.Init,
		Env:         append(append([]string{}, inst.Env...), "container=vessel"),
		Cwd:         inst.Cwd,
		Netns:       ep.Netns,
		CgroupsPath: d.cfg.cgroupPath(name),
		EmptyDir:    d.cfg.emptyDir(),
	})
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

// launchPrepared creates the processes, watches them and records the
// start. A failure undoes the preparation too.
func (d *Daemon) launchPrepared(ctx context.Context, p *prepared, launch launchFunc) (err error) {
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	bg := context.WithoutCancel(ctx)
	proc, err := launch(p.bundle, p.logPath)
	if err != nil {
		return err
	}
	p.r.Add(func() { _ = d.rt.Kill(bg, p.name); _ = d.rt.Delete(bg, p.name) })
	// It runs: the container's own weight from now on.
	if err := d.applyLimits(ctx, p.name, p.config, 0); err != nil {
		return fmt.Errorf("limits of %s: %w", p.name, err)
	}
	if p.netLock {
		if err := d.net.SetHostLink(p.name, true); err != nil {
			return err
		}
	}
	if _, err := d.track(p.name, proc); err != nil {
		return err
	}
	p.r.Success()

	osr := d.refreshOS(p.name)
	_, err = d.state.UpdateInstance(p.name, func(i *state.Instance) error {
		i.State = state.StateRunning
		i.LastStart = time.Now().UTC()
		if osr.ID != "" {
			i.OS = osr
		}
		return nil
	})
	return err
}
