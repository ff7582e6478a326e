// Package storage keeps container and image filesystems in a storage pool.
//
// Vocabulary:
//
//   - Pool: the place one driver keeps all its volumes, e.g. a btrfs
//     filesystem on a loop-mounted file under the daemon's root, or a plain
//     directory. A pool is mounted (made usable) at daemon start and
//     unmounted when the daemon stops with nothing running.
//   - Volume: one named filesystem tree in the pool. Its Type says what it
//     holds: an unpacked image ("image", read-only once filled), a container's
//     root filesystem ("container"), or a point-in-time copy of a container
//     ("snapshot", named "CONTAINER/SNAP"), or the memory and process state
//     of a container saved with a snapshot ("checkpoint", also named
//     "CONTAINER/SNAP": CRIU's image files, kept on the same storage as the
//     disk they belong to).
//   - Clone: a new volume whose content starts as a copy of another. On btrfs
//     this is a subvolume snapshot (constant time, copy-on-write); on dir it is
//     a full copy.
//
// Every pool lays its volumes out the same way under its root:
// images/NAME, containers/NAME, snapshots/CONTAINER/SNAP and
// checkpoints/CONTAINER/SNAP. Names are
// checked (ErrInvalidVolume), so no volume can reach outside its directory.
//
// Drivers are listed in one map of constructors (see drivers.go). Callers test
// a driver's capabilities in Info, never its name. A driver that cannot work
// on this host returns an error wrapping ErrNotSupported, so the caller can
// fall back (btrfs -> dir).
package storage

import (
	"context"
	"errors"
	"io"
)

// VolumeType says what a volume holds.
type VolumeType string

// Volume types.
const (
	VolumeImage     VolumeType = "image"
	VolumeContainer VolumeType = "container"
	VolumeSnapshot  VolumeType = "snapshot"
	// VolumeCheckpoint holds a checkpoint's image files (a plain writable
	// volume; "CONTAINER/SNAP" like a snapshot).
	VolumeCheckpoint VolumeType = "checkpoint"
)

// Volume names one filesystem tree in a pool. Snapshot and checkpoint
// volumes are named "CONTAINER/SNAP"; every other name is a single path
// element.
type Volume struct {
	Type VolumeType
	Name string
}

// Info describes a driver's capabilities as data.
type Info struct {
	// Name is the driver's name as used in configuration ("btrfs", "dir").
	Name string
	// InstantClone is true when CloneVolume takes constant time whatever the
	// volume's size (copy-on-write).
	InstantClone bool
	// BlockBacked is true when the pool lives on block devices that
	// BlockDevices can name (used for block I/O limits).
	BlockBacked bool
}

// Usage is a pool's or a volume's space accounting, in bytes.
type Usage struct {
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"`
	Free  uint64 `json:"free"`
}

// Config selects and configures a pool.
type Config struct {
	// Driver is a key of the Drivers map ("btrfs" or "dir").
	Driver string
	// Root is the directory the pool is mounted at (btrfs) or lives in (dir).
	Root string
	// Source, for btrfs, is either empty (use a loop-backed image file
	// LoopFile, created on first Mount) or a path on an existing btrfs
	// filesystem to use as-is (nothing is mounted then, and Source, not
	// Root, is the pool root).
	Source string
	// LoopFile is where the loop-backed pool image lives when Source is empty.
	LoopFile string
	// Size is the size of a new loop-backed pool image in bytes.
	Size int64
}

// Driver is the small interface every storage backend implements.
// Every method that blocks or runs a process takes ctx first.
type Driver interface {
	// Info returns the driver's capabilities.
	Info() Info
	// Mount makes the pool usable: on first use it creates it (pool image,
	// mkfs); later it only attaches and mounts it. Mount is idempotent.
	Mount(ctx context.Context) error
	// Unmount releases the pool (unmount, detach loop device). Volumes stay
	// on disk. Unmount is idempotent.
	Unmount(ctx context.Context) error
	// Path returns the host path of a volume's tree (it need not exist).
	Path(vol Volume) string
	// CreateVolume creates an empty, writable volume.
	CreateVolume(ctx context.Context, vol Volume) error
	// CloneVolume creates dst as a copy of src; readOnly makes dst immutable.
	CloneVolume(ctx context.Context, dst, src Volume, readOnly bool) error
	// SetReadOnly makes a volume immutable (true) or writable (false).
	SetReadOnly(ctx context.Context, vol Volume, readOnly bool) error
	// DeleteVolume removes a volume and everything in it. Deleting a volume
	// that does not exist is not an error.
	DeleteVolume(ctx context.Context, vol Volume) error
	// VolumeExists reports whether a volume exists.
	VolumeExists(vol Volume) bool
	// VolumeUsage returns the bytes a volume uses (Used only).
	VolumeUsage(ctx context.Context, vol Volume) (uint64, error)
	// PoolUsage returns the pool's total, used and free bytes.
	PoolUsage(ctx context.Context) (Usage, error)
	// BlockDevices returns the whole-disk block devices ("MAJ:MIN") backing
	// the pool, resolved through loop devices and partitions. Drivers whose
	// Info has BlockBacked false may return the devices of the filesystem
	// holding Root.
	BlockDevices(ctx context.Context) ([]string, error)
}

// Errors returned by drivers, wrapped with what was being done.
var (
	// ErrNotSupported says a driver cannot work on this host.
	ErrNotSupported = errors.New("storage driver not supported on this host")
	// ErrVolumeExists says a volume of that type and name already exists.
	ErrVolumeExists = errors.New("volume already exists")
	// ErrVolumeNotFound says a volume does not exist.
	ErrVolumeNotFound = errors.New("volume not found")
	// ErrUnknownDriver says Config.Driver names no driver.
	ErrUnknownDriver = errors.New("unknown storage driver")
	// ErrTransferFormat says a stream is not a pass of the receiving
	// driver's TransferFormat: another driver's or version's stream,
	// garbage, a pass cut short, or a pass of another volume.
	ErrTransferFormat = errors.New("not a pass of this driver's transfer format")
)

// Sender is implemented by drivers that can stream a read-only volume in
// their native format (btrfs send), whole or as the difference from a
// parent volume the receiver already has. Callers find it by type
// assertion.
type Sender interface {
	SendVolume(ctx context.Context, vol Volume, parent *Volume, w io.Writer) error
}

// Receiver is the other end of Sender: it reads a stream made by a driver
// of the same kind into a new read-only volume vol (whose last name
// element must be the sent volume's), and can force received data to disk.
type Receiver interface {
	ReceiveVolume(ctx context.Context, vol Volume, r io.Reader) error
	// Sync makes everything written to the pool durable (syncfs).
	Sync(ctx context.Context) error
}

// Manifest records what a tree sync pass sent: each entry's path (relative
// to the volume root) and a stamp of its inode; a later pass sends only
// entries whose stamp changed.
type Manifest = manifest

// Stamp is an entry's inode state as a tree sync compares it.
type Stamp = stamp

// TreeSyncer is implemented by drivers without send streams (dir): a
// volume moves in rsync-style passes over its live tree. Callers find it by
// type assertion.
type TreeSyncer interface {
	// SyncVolume writes to w the entries of vol that differ from prev (all
	// of them when prev is nil) and the paths deleted since prev, as a
	// tar-sync/1 pass, and returns the new manifest.
	SyncVolume(ctx context.Context, vol Volume, prev Manifest, w io.Writer) (Manifest, error)
	// ApplySync applies such a stream to vol, creating it if missing.
	ApplySync(ctx context.Context, vol Volume, r io.Reader) error
	// Sync makes everything written to the pool durable.
	Sync(ctx context.Context) error
}
