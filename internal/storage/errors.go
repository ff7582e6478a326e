package storage

import "errors"

// More errors returned by drivers, wrapped with what was being done. The
// ones in storage.go say what happened to a volume or the host; these say the
// caller asked for something malformed or too early.
var (
	// ErrInvalidVolume says a Volume has an unknown Type or a malformed Name
	// (empty, ".", "..", a slash outside the snapshot form CONTAINER/SNAP).
	ErrInvalidVolume = errors.New("invalid volume")
	// ErrInvalidConfig says a Config cannot describe a pool (relative paths,
	// missing LoopFile, a btrfs Source that is not on btrfs).
	ErrInvalidConfig = errors.New("invalid storage configuration")
	// ErrNotMounted says the pool must be mounted (Mount) first.
	ErrNotMounted = errors.New("storage pool not mounted")
	// ErrTransferState says a VolumeSender or VolumeReceiver was called out
	// of order: a pass after Close, Commit or a failed pass, a second pass
	// of a snapshot volume, a Commit without a pass.
	ErrTransferState = errors.New("transfer call out of order")
)
