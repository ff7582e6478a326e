package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Transfers (see VolumeSender and VolumeReceiver) are implemented per
// driver in btrfs_transfer.go and dir_transfer.go; this file holds what
// they share: the names of transfer leftovers and the order of calls.

// transferPrefix begins the name of everything a transfer keeps in the
// pool (snapshots/CONTAINER/.migrate-I); user snapshot names are DNS
// labels, so they never collide with it.
const transferPrefix = ".migrate-"

// transferSnapshot is the volume of pass i of a transfer of container name.
func transferSnapshot(name string, i int) Volume {
	return Volume{Type: VolumeSnapshot, Name: fmt.Sprintf("%s/%s%d", name, transferPrefix, i)}
}

// checkTransfer checks that vol is a valid container or snapshot volume
// and base, if not nil, a valid snapshot volume.
func checkTransfer(vol Volume, base *Volume) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	if vol.Type != VolumeContainer && vol.Type != VolumeSnapshot {
		return fmt.Errorf("transfer %s: only container and snapshot volumes move: %w", vol, ErrInvalidVolume)
	}
	if base == nil {
		return nil
	}
	if err := validateVolume(*base); err != nil {
		return fmt.Errorf("transfer %s: base: %w", vol, err)
	}
	if base.Type != VolumeSnapshot {
		return fmt.Errorf("transfer %s: base %s is not a snapshot: %w", vol, *base, ErrInvalidVolume)
	}
	return nil
}

// transferLeftovers returns the transfer snapshots (or half-received
// ones) of container name in the pool at root.
func transferLeftovers(root, name string) ([]Volume, error) {
	if err := validateNameElem(name); err != nil {
		return nil, fmt.Errorf("transfers of %q: %w: %w", name, err, ErrInvalidVolume)
	}
	entries, err := os.ReadDir(filepath.Join(root, typeDirs[VolumeSnapshot], name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("transfers of %q: %w", name, err)
	}
	var vols []Volume
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), transferPrefix) {
			vols = append(vols, Volume{Type: VolumeSnapshot, Name: name + "/" + e.Name()})
		}
	}
	return vols, nil
}

// deleteVolumes deletes the volumes in *vols, newest first, and leaves in
// it those it could not delete. It runs to the end even if ctx is
// cancelled: it is cleanup.
func deleteVolumes(ctx context.Context, d Driver, vols *[]Volume) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	var kept []Volume
	for i := len(*vols) - 1; i >= 0; i-- {
		if err := d.DeleteVolume(ctx, (*vols)[i]); err != nil {
			errs = append(errs, err)
			kept = append([]Volume{(*vols)[i]}, kept...)
		}
	}
	*vols = kept
	return errors.Join(errs...)
}

// transferState is where a sender or receiver is in its life: passes,
// then (receiver) Commit, then Close. A failed pass leaves only Close.
// Calls out of that order get an error wrapping ErrTransferState.
type transferState struct {
	vol       Volume
	passes    int // passes that succeeded
	failed    bool
	committed bool
	closed    bool
}

// beginPass returns an error unless another pass may run now.
func (s *transferState) beginPass() error {
	switch {
	case s.closed:
		return s.refuse("a pass after Close")
	case s.committed:
		return s.refuse("a pass after Commit")
	case s.failed:
		return s.refuse("a pass after a failed one")
	case s.vol.Type == VolumeSnapshot && s.passes > 0:
		return s.refuse("a second pass of a snapshot volume (it moves in one)")
	}
	return nil
}

// endPass records the outcome of a pass and returns err.
func (s *transferState) endPass(err error) error {
	if err != nil {
		s.failed = true
		return err
	}
	s.passes++
	return nil
}

// beginCommit returns an error unless Commit may run now.
func (s *transferState) beginCommit() error {
	switch {
	case s.closed:
		return s.refuse("Commit after Close")
	case s.committed:
		return s.refuse("a second Commit")
	case s.failed:
		return s.refuse("Commit after a failed pass")
	case s.passes == 0:
		return s.refuse("Commit without a pass")
	}
	return nil
}

// refuse returns the error for a call out of order.
func (s *transferState) refuse(what string) error {
	return fmt.Errorf("transfer %s: %s: %w", s.vol, what, ErrTransferState)
}
