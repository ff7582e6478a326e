package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
)

// DeleteInstance deletes an instance and everything it owns. A running one
// is refused unless force is set (then it is killed first).
func (d *Daemon) DeleteInstance(ctx context.Context, name string, force bool) (*operations.Operation, error) {
	if _, err := d.getRecord(name); err != nil {
		return nil, err
	}
	if d.liveOf(name) != nil && !force {
		return nil, errorf(ErrConflict, "instance %q is running: stop it first or use --force", name)
	}
	return d.ops.Start(d.ctx, "Deleting instance", instanceResources(name), func(ctx context.Context, _ *operations.Operation) error {
		return d.withInstance(ctx, name, api.StatusStopping, func() error { return d.deleteLocked(ctx, name, force) })
	}), nil
}

func (d *Daemon) deleteLocked(ctx context.Context, name string, force bool) error {
	if _, err := d.getRecord(name); err != nil {
		return err
	}
	if d.liveOf(name) != nil {
		if !force {
			return errorf(ErrConflict, "instance %q is running: stop it first or use --force", name)
		}
		if err := d.stopLocked(ctx, name, true, 0); err != nil {
			return err
		}
	}
	if err := d.deleteSnapshotsLocked(ctx, name); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	var errs []error
	if err := d.storage.DeleteVolume(ctx, containerVolume(name)); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []string{d.cfg.bundleDir(name), filepath.Dir(d.cfg.logPath(name)), filepath.Dir(d.cfg.restoreWorkDir(name))} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Keep the record so the user can retry; nothing is half-forgotten.
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return d.state.DeleteInstance(name)
}
