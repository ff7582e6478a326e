package daemon

import (
	"context"
	"fmt"

	"github.com/vesselhost/vessel/internal/operations"
)

// DeleteInstance deletes an instance and everything it owns. A running one
// is refused unless force is set (then it is killed first).
func (d *Daemon) DeleteInstance(ctx context.Context, name string, force bool) (*operations.Operation, error) {
	if _, err := d.checkNow(name, actDelete, force); err != nil {
		return nil, err
	}
	return d.ops.Start(d.ctx, "Deleting instance", instanceResources(name), func(ctx context.Context, _ *operations.Operation) error {
		inst, release, err := d.lock(ctx, name, actDelete, force)
		if err != nil {
			return err
		}
		defer release()
		return d.deleteLocked(ctx, inst)
	}), nil
}

// deleteLocked stops the instance if it runs, deletes its snapshots,
// its volume and files, then its records (instance, snapshots left,
// migration journal) in one transaction. A failure before that keeps the
// records, so the user can retry; nothing is half forgotten.
func (d *Daemon) deleteLocked(ctx context.Context, inst *instance) error {
	if inst.live() != nil {
		if err := d.stopLocked(ctx, inst, true, 0); err != nil {
			return err
		}
	}
	if err := d.deleteSnapshotsLocked(ctx, inst.name); err != nil {
		return fmt.Errorf("delete %s: %w", inst.name, err)
	}
	if err := d.removeInstanceFiles(ctx, inst.name); err != nil {
		return fmt.Errorf("delete %s: %w", inst.name, err)
	}
	return d.forget(inst)
}
