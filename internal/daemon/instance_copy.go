package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// copyInstance validates a copy request (source "NAME/SNAP", a snapshot, or
// "NAME", a stopped container) and runs it as an operation. The new
// container gets its own address and hostname, the source's image, init
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
	if _, err := d.getRecord(srcName); err != nil {
		return nil, err
	}
	if snap != "" {
		if _, err := d.getSnapshotRecord(srcName, snap); err != nil {
			return nil, err
		}
	} else if d.liveOf(srcName) != nil {
		return nil, errorf(ErrConflict, "instance %q is running: stop it, or copy one of its snapshots", srcName)
	}
	if _, err := d.state.GetInstance(req.Name); err == nil {
		return nil, errorf(ErrConflict, "instance %q already exists", req.Name)
	}
	return d.ops.Start(d.ctx, "Copying instance", instanceResources(req.Name), func(ctx context.Context, op *operations.Operation) error {
		return d.copy(ctx, op, req, srcName, snap)
	}), nil
}

func (d *Daemon) copy(ctx context.Context, op *operations.Operation, req api.InstancesPost, srcName, snap string) error {
	unlock, err := d.lockInstance(ctx, req.Name)
	if err != nil {
		return err
	}
	defer unlock()
	defer d.setBusy(req.Name, api.StatusStarting)()
	// The source must not change (start, restore, delete) while it is
	// cloned. Locks are taken new-then-source; the new name is not yet
	// anyone's source, so two copies cannot wait on each other.
	unlockSrc, err := d.lockInstance(ctx, srcName)
	if err != nil {
		return err
	}
	srcUnlocked := false
	defer func() {
		if !srcUnlocked {
			unlockSrc()
		}
	}()

	src, err := d.getRecord(srcName)
	if err != nil {
		return err
	}
	cfg := src.Config
	srcVol := containerVolume(srcName)
	if snap != "" {
		rec, err := d.getSnapshotRecord(srcName, snap)
		if err != nil {
			return err
		}
		cfg, srcVol = rec.Config, snapshotVolume(srcName, snap)
	} else if d.liveOf(srcName) != nil {
		return errorf(ErrConflict, "instance %q is running: stop it, or copy one of its snapshots", srcName)
	}
	cfg = maps.Clone(cfg)
	if cfg == nil {
		cfg = map[string]string{}
	}
	maps.Copy(cfg, req.Config)

	r := revert.New()
	defer r.Fail()
	inst := state.Instance{
		Name: req.Name, Image: src.Image, Created: time.Now().UTC(), Config: cfg,
		Init: src.Init, Env: src.Env, Cwd: src.Cwd, StopSignal: src.StopSignal, OS: src.OS,
		State: state.StateStopped,
	}
	if err := d.createRecord(&inst); err != nil {
		return err
	}
	r.Add(func() { _ = d.state.DeleteInstance(inst.Name) })

	op.SetMetadata(map[string]any{"stage": "rootfs"})
	vol := containerVolume(inst.Name)
	if err := d.storage.CloneVolume(ctx, vol, srcVol, false); err != nil {
		if errors.Is(err, storage.ErrVolumeExists) {
			return errorf(ErrConflict, "a volume for %q exists already", inst.Name)
		}
		return fmt.Errorf("copy root filesystem: %w", err)
	}
	r.Add(func() { _ = d.storage.DeleteVolume(context.WithoutCancel(ctx), vol) })
	unlockSrc()
	srcUnlocked = true
	if err := d.finishCreate(ctx, op, inst, req.Start); err != nil {
		return err
	}
	r.Success()
	return nil
}
