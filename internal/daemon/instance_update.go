package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
)

// UpdateInstance changes an instance's configuration (keys with an empty
// value are removed) and runs the change as an operation. The keys are
// checked before any work; the operation then validates the whole new
// configuration, applies it to a running container and saves it only if
// that worked. If the kernel refuses a limit (say, a memory limit below
// what the container uses and cannot give back), the previous limits are
// written again and nothing is saved.
func (d *Daemon) UpdateInstance(ctx context.Context, name string, req api.InstancePatch) (*operations.Operation, error) {
	if _, err := d.instance(name); err != nil {
		return nil, err
	}
	if len(req.Config) == 0 {
		return nil, errorf(ErrInvalid, "no configuration keys to change")
	}
	set := map[string]string{}
	for k, v := range req.Config {
		if err := validateKey(k); err != nil {
			return nil, err
		}
		if v != "" {
			set[k] = v
		}
	}
	if err := validateConfig(set); err != nil {
		return nil, err
	}
	return d.ops.Start(d.ctx, "Updating instance", instanceResources(name), func(ctx context.Context, _ *operations.Operation) error {
		inst, release, err := d.lock(ctx, name, actUpdate, false)
		if err != nil {
			return err
		}
		defer release()
		return d.updateLocked(ctx, inst, req.Config)
	}), nil
}

// updateLocked merges patch into the instance's configuration, applies and
// saves it; the caller holds the instance's lock.
func (d *Daemon) updateLocked(ctx context.Context, inst *instance, patch map[string]string) error {
	name := inst.name
	prev := inst.record().Config
	cfg := maps.Clone(prev)
	if cfg == nil {
		cfg = map[string]string{}
	}
	for k, v := range patch {
		if v == "" {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	if err := validateConfig(cfg); err != nil {
		return err
	}
	running := inst.live() != nil
	if running && isVM(inst) {
		return d.updateRunningVM(ctx, inst, prev, cfg)
	}
	if running {
		if err := d.applyLimits(ctx, name, cfg, 0); err != nil {
			return d.restoreLimits(ctx, name, prev, err)
		}
	}
	err := d.save(inst, func(_ *state.Tx, rec *state.Instance) error {
		rec.Config = cfg
		return nil
	})
	if err != nil && running {
		return d.restoreLimits(ctx, name, prev, fmt.Errorf("save configuration: %w", err))
	}
	return err
}

// restoreLimits writes a running instance's previous limits again after
// applying new ones failed with cause.
func (d *Daemon) restoreLimits(ctx context.Context, name string, prev map[string]string, cause error) error {
	if err := d.applyLimits(context.WithoutCancel(ctx), name, prev, 0); err != nil {
		d.log.Error("restore previous limits", "name", name, "err", err)
		return fmt.Errorf("apply configuration to %q: %w; restoring the previous limits failed too: %w", name, cause, err)
	}
	if errors.Is(cause, ErrInvalid) || errors.Is(cause, ErrConflict) {
		return fmt.Errorf("%w (previous limits kept)", cause)
	}
	return errorf(ErrConflict, "apply configuration to %q: %w (previous limits kept)", name, cause)
}
