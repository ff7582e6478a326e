package daemon

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
)

// copyInstance validates a copy request (source "NAME/SNAP", a snapshot, or
// "NAME", a stopped instance) and runs it as an operation. The new
// instance gets its own address (a VM's MAC is derived from it) and
// hostname, the source's type, image, init
// and configuration (the snapshot's, for a snapshot), with req.Config's
// keys on top. A copy of an instance gets its snapshots too unless
// req.Source.InstanceOnly; a copy of a snapshot gets none.
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
		// A VM's disk is the guest's own: its first boot empties the
		// machine ID (a container's is emptied on the disk: writeIdentity).
		NewIdentity: srcRec.IsVM(),
	}
	var snaps []state.Snapshot
	if snap == "" && !req.Source.InstanceOnly {
		if snaps, err = d.state.ListSnapshots(srcName); err != nil {
			return err
		}
	}
	fill := func(ctx context.Context, inst *instance, r *revert.Reverter) error {
		return d.copySnapshots(ctx, op, r, srcName, inst.name, snaps, srcRec.IsVM())
	}
	return d.createFrom(ctx, op, rec, srcVol, req.Start, fill)
}

// copySnapshots gives dst, a new local copy of src, src's snapshots
// (snaps, oldest first): each disk a read-only clone of the source's (on
// btrfs a snapshot of the snapshot, one ioctl; on dir a sparse copy), a
// stateful one's checkpoint a clone too where the copy can use it
// (snapshotForCopy), and the record. Nothing is shared with src's: either
// may go without the other. r undoes each step.
func (d *Daemon) copySnapshots(ctx context.Context, op *operations.Operation, r *revert.Reverter, src, dst string, snaps []state.Snapshot, vm bool) error {
	bg := context.WithoutCancel(ctx)
	for i, s := range snaps {
		op.SetMetadata(map[string]any{api.MetaStage: "snapshots", "snapshot": s.Name, "iteration": i})
		vol := snapshotVolume(dst, s.Name)
		if err := d.storage.CloneVolume(ctx, vol, snapshotVolume(src, s.Name), true); err != nil {
			return fmt.Errorf("copy snapshot %s: %w", s.Name, err)
		}
		r.Add(func() { d.undo("delete snapshot volume", dst, d.storage.DeleteVolume(bg, vol)) })
		c := snapshotForCopy(s, vm)
		c.Instance = dst
		if c.Stateful {
			ck := checkpointVolume(dst, s.Name)
			if err := d.storage.CloneVolume(ctx, ck, checkpointVolume(src, s.Name), false); err != nil {
				return fmt.Errorf("copy the checkpoint of snapshot %s: %w", s.Name, err)
			}
			r.Add(func() { d.undo("delete checkpoint volume", dst, d.storage.DeleteVolume(bg, ck)) })
		}
		d.crashAt(faultCopySnapshot)
		if d.fault(faultCopySnapshot) == "fail" {
			return injected(faultCopySnapshot)
		}
		if err := d.state.CreateSnapshot(c); err != nil {
			return err
		}
		r.Add(func() { d.undo("delete snapshot record", dst, d.state.DeleteSnapshot(dst, c.Name)) })
	}
	return nil
}

// snapshotForCopy is snapshot s as a copy of its instance gets it, here
// or on another host. A copy has an address of its own (and a VM the MAC
// derived from it). A container's saved processes come back in the
// copy's network namespace (CRIU takes it from outside its images) and
// user namespace (restoreImages maps the images to the copy's ids), so a
// container's state goes along. A VM's saved state is its memory and
// devices: the source's MAC (virtio-net's state) and address (the
// guest's), which the copy's tap filter drops; a VM's copy gets the disk
// snapshot alone. Every copied snapshot holds the source's identity
// (hostname, hosts file, machine ID): a restore in the copy gives the
// copy its own again (restoreIdentity), the disk is not rewritten here.
func snapshotForCopy(s state.Snapshot, vm bool) state.Snapshot {
	if vm && s.Stateful {
		s.Stateful, s.MemoryBytes = false, 0
	}
	s.ForeignIdentity = true
	return s
}
