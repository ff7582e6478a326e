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

// startLocked starts a stopped instance; the caller holds its lock.
func (d *Daemon) startLocked(ctx context.Context, name string) error {
	inst, err := d.getRecord(name)
	if err != nil {
		return err
	}
	if d.liveOf(name) != nil {
		return errorf(ErrConflict, "instance %q is already running", name)
	}
	r := revert.New()
	defer r.Fail()
	bg := context.WithoutCancel(ctx)

	ep, err := d.net.Attach(ctx, name, inst.Address)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	r.Add(func() { _ = d.net.Detach(bg, name) })

	// The container's cgroup gets its limits before runc puts init in it,
	// with a boosted CPU weight until init runs (startCPUWeight): the
	// container's side of starting (runc's init: namespaces, mounts,
	// seccomp) is control work, and must not queue behind busy
	// neighbours while the host fills up.
	r.Add(func() {
		if cg, err := d.instanceCgroup(name); err == nil {
			_ = cg.Destroy()
		}
	})
	if err := d.applyLimits(ctx, name, inst.Config, d.startCPUWeight()); err != nil {
		return fmt.Errorf("limits of %s: %w", name, err)
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
	})
	if err != nil {
		return err
	}
	bundle := d.cfg.bundleDir(name)
	if err := runtime.WriteBundle(bundle, spec); err != nil {
		return err
	}
	logPath := d.cfg.logPath(name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return err
	}
	proc, err := d.rt.Start(ctx, name, bundle, runtime.StartOptions{LogPath: logPath})
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	r.Add(func() { _ = d.rt.Kill(bg, name); _ = d.rt.Delete(bg, name) })
	// Init runs: the container's own weight from now on.
	if err := d.applyLimits(ctx, name, inst.Config, 0); err != nil {
		return fmt.Errorf("limits of %s: %w", name, err)
	}
	if _, err := d.track(name, proc); err != nil {
		return err
	}
	r.Success()

	osr := d.refreshOS(name)
	_, err = d.state.UpdateInstance(name, func(i *state.Instance) error {
		i.Running = true
		i.LastStart = time.Now().UTC()
		if osr.ID != "" {
			i.OS = osr
		}
		return nil
	})
	return err
}
