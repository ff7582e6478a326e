package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/vesselhost/vessel/internal/operations"
)

// DeleteSnapshot validates a delete request and runs it as an operation.
func (d *Daemon) DeleteSnapshot(ctx context.Context, name, snap string) (*operations.Operation, error) {
	if _, err := d.getSnapshotRecord(name, snap); err != nil {
		return nil, err
	}
	return d.ops.Start(d.ctx, "Deleting snapshot", snapshotResources(name, snap), func(ctx context.Context, _ *operations.Operation) error {
		_, release, err := d.lock(ctx, name, actDeleteSnapshot, false)
		if err != nil {
			return err
		}
		defer release()
		if _, err := d.getSnapshotRecord(name, snap); err != nil {
			return err
		}
		return d.deleteSnapshotLocked(ctx, name, snap)
	}), nil
}

// deleteSnapshotLocked removes a snapshot's volumes, then its record (so a
// failure leaves it listed, for a retry).
func (d *Daemon) deleteSnapshotLocked(ctx context.Context, name, snap string) error {
	var errs []error
	if err := d.storage.DeleteVolume(ctx, checkpointVolume(name, snap)); err != nil {
		errs = append(errs, err)
	}
	if err := d.storage.DeleteVolume(ctx, snapshotVolume(name, snap)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete snapshot %s/%s: %w", name, snap, err)
	}
	return d.state.DeleteSnapshot(name, snap)
}

// deleteSnapshotsLocked deletes every snapshot of an instance (when the
// instance is deleted).
func (d *Daemon) deleteSnapshotsLocked(ctx context.Context, name string) error {
	recs, err := d.state.ListSnapshots(name)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := d.deleteSnapshotLocked(ctx, name, r.Name); err != nil {
			return err
		}
	}
	return nil
}
