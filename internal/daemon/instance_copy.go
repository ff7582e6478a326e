package daemon

import (
	"context"
	"maps"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
)

// copyInstance validates a copy request (source "NAME/SNAP", a snapshot, or
// "NAME", a stopped instance) and runs it as an operation. The new
// instance gets its own address (a VM's MAC is derived from it) and
// hostname, the source's type, image, init
// and configuration (the snapshot's, for a snapshot), with req.Config's
// keys on top.
func (d *Daemon) copyInstance(ctx context.Context, req api.InstancesPost) (*operations.Operation, error) {
	if req.Source.Source == "" {
		return nil, errorf(ErrInvalid, "copy needs a source: NAME or NAME/SNAP")
	}
	srcName, snap, err := splitSnapshotRef(req.Source.Source)
	if err != nil {
		return nil, err
	}
	if err := validateConfig(req.Config); err != nil {
		return nil, err
	}
	if snap != "" {
		if _, err := d.getSnapshotRecord(srcName, snap); err != nil {
			return nil, err
		}
	} else if _, err := d.checkNow(srcName, actCopyFrom, false); err != nil {
		return nil, err
	}
	if d.insts.get(req.Name) != nil {
		return nil, errorf(ErrConflict, "instance %q already exists", req.Name)
	}
	return d.ops.Start(d.ctx, "Copying instance", instanceResources(req.Name), func(ctx context.Context, op *operations.Operation) error {
		return d.copy(ctx, op, req, srcName, snap)
	}), nil
}

// copy holds the source's lock while its disk is cloned: it must not
// start, restore or go meanwhile. The new instance is registered (and
// locked) after the source is locked; the new name is nobody's source
// yet, so two copies never wait on each other.
func (d *Daemon) copy(ctx context.Context, op *operations.Operation, req api.InstancesPost, srcName, snap string) error {
	act := actCopyFrom
	if snap != "" {
		act = actSnapshot // any state: a snapshot does not change
	}
	src, release, err := d.lock(ctx, srcName, act, false)
	if err != nil {
		return err
	}
	defer release()
	srcRec := src.record()
	cfg := srcRec.Config
	srcVol := containerVolume(srcName)
	if snap != "" {
		rec, err := d.getSnapshotRecord(srcName, snap)
		if err != nil {
			return err
		}
		cfg, srcVol = rec.Config, snapshotVolume(srcName, snap)
	}
	cfg = maps.Clone(cfg)
	if cfg == nil {
		cfg = map[string]string{}
	}
	maps.Copy(cfg, req.Config)
	rec := state.Instance{
		Name: req.Name, Image: srcRec.Image, Created: time.Now().UTC(), Config: cfg,
		Init: srcRec.Init, Env: srcRec.Env, Cwd: srcRec.Cwd, StopSignal: srcRec.StopSignal, OS: srcRec.OS,
		State: state.StateCreating, Type: srcRec.Type,
	}
	return d.createFrom(ctx, op, rec, srcVol, req.Start)
}
