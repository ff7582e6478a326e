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
//   - Transfer: moving a container or snapshot volume to another host's pool
//     (live migration). A VolumeSender on this host writes passes, a
//     VolumeReceiver on the other host applies them; both pools' drivers have
//     the same Info.TransferFormat.
//   - Pass: one stream of a transfer, in the driver's own format. The first
//     carries the whole volume (or its difference from a base snapshot the
//     receiver already has), each later one what changed since the pass
//     before. On btrfs a pass is a btrfs send stream of a read-only transfer
//     snapshot (snapshots/CONTAINER/.migrate-I); on dir a tar stream of the
//     entries of the live tree that changed.
//
// Every pool lays its volumes out the same way under its root:
// images/NAME, containers/NAME, snapshots/CONTAINER/SNAP and
// checkpoints/CONTAINER/SNAP; a driver's transfer leftovers are named
// snapshots/CONTAINER/.migrate-* (user snapshot names are DNS labels, so
// they never collide). Names are checked (ErrInvalidVolume), so no volume
// can reach outside its directory.
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
	// VolumeVMImage holds an image's VM disk (internal/vm: disk.img, a raw
	// ext4 file built once from the image's volume), named by the image's
	// fingerprint. A VM instance's container volume is a clone of it.
	VolumeVMImage VolumeType = "vm-image"
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
	// TransferFormat names the stream format of the driver's volume transfers
	// (e.g. "btrfs-send/1", "tar-sync/1"); a volume moves between two hosts
	// whose drivers have the same format. Callers compare formats, never names.
	TransferFormat string
	// DurableCommit is true when a receiver's Commit puts what the passes
	// brought on disk by itself (btrfs: a snapshot flushes its source's
	// data and commits the transaction), so a caller that commits right
	// after the last pass need not Sync before it.
	DurableCommit bool
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
	// LoopFile is where the loop-backed pool image lives when Source and
	// Device are empty.
	LoopFile string
	// Device, for btrfs, is a block device holding a btrfs filesystem to
	// mount at Root instead of a loop-backed image (e.g.
	// /dev/disk/by-uuid/UUID). The driver never formats it: `vessel admin
	// init --storage-device` does, once.
	Device string
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
	// ListVolumes returns the volumes of type t in the pool, sorted by
	// name (reconcile compares them with the records). Transfer leftovers
	// (DropTransfers removes them) are not listed.
	ListVolumes(ctx context.Context, t VolumeType) ([]Volume, error)
	// VolumeUsage returns the bytes a volume uses (Used only).
	VolumeUsage(ctx context.Context, vol Volume) (uint64, error)
	// PoolUsage returns the pool's total, used and free bytes.
	PoolUsage(ctx context.Context) (Usage, error)
	// BlockDevices returns the whole-disk block devices ("MAJ:MIN") backing
	// the pool, resolved through loop devices and partitions. Drivers whose
	// Info has BlockBacked false may return the devices of the filesystem
	// holding Root.
	BlockDevices(ctx context.Context) ([]string, error)
	// Sync makes everything written to the pool durable (syncfs of the pool).
	Sync(ctx context.Context) error
	// NewSender prepares sending vol (a container or snapshot volume) to
	// another host. base, if not nil, is a snapshot volume the receiver
	// already has (received earlier in the same transfer): the first pass
	// of a container volume may be sent as its difference from base.
	NewSender(vol Volume, base *Volume) (VolumeSender, error)
	// NewReceiver prepares receiving vol from a sender with the same
	// TransferFormat. vol must not exist yet. The receiver's volume may have
	// another container name than the sender's, but a snapshot volume keeps
	// its SNAP name (btrfs streams carry it).
	NewReceiver(vol Volume) (VolumeReceiver, error)
	// DropTransfers removes whatever interrupted transfers of container
	// `name` left in the pool, on either end (after a daemon crash).
	// Nothing left is not an error. It never removes the container's own
	// volume, nor a volume a receiver was filling (the caller knows which
	// end it was and deletes that volume itself).
	DropTransfers(ctx context.Context, name string) error
}

// A VolumeSender sends one volume in passes. The first pass carries the
// whole volume (or its difference from base); each later pass what changed
// since the pass before, deletions included. A container volume may change
// between passes (pre-copy of a running container); the caller makes the
// last pass while it does not. A snapshot volume is read-only: one pass sends it.
//
// A failed pass ends the transfer: only Close may follow. A VolumeSender is
// used by one goroutine at a time.
type VolumeSender interface {
	// SendPass writes the next pass to w.
	SendPass(ctx context.Context, w io.Writer) error
	// Close releases what the passes kept on this end (btrfs: its transfer
	// snapshots). Safe to call more than once. It runs to the end even if
	// ctx is cancelled (it is cleanup).
	Close(ctx context.Context) error
}

// A PassPreparer is a VolumeReceiver that can ready the next pass before
// it arrives (btrfs: start its btrfs receive), so that the pass itself,
// the final one of a live move in particular, only applies the stream.
// Optional: a caller that knows another pass follows calls it between
// passes; a failure only means the next pass starts from nothing.
type PassPreparer interface {
	// PrepareNextPass readies the next ReceivePass. What it started is
	// ended by Close if no pass uses it.
	PrepareNextPass(ctx context.Context) error
}

// A VolumeReceiver applies a sender's passes.
//
// A failed pass removes what it half applied (on dir that is the whole
// volume, which can no longer be completed) and ends the transfer: only
// Close may follow. A VolumeReceiver is used by one goroutine at a time.
type VolumeReceiver interface {
	// ReceivePass reads one pass from r and applies it. It does not sync:
	// the caller calls Driver.Sync before it acknowledges (so data is on
	// the target's disk before the source freezes). A stream that is not
	// a pass of this driver's TransferFormat gives an error wrapping
	// ErrTransferFormat.
	ReceivePass(ctx context.Context, r io.Reader) error
	// Commit makes vol from the passes received: a container volume becomes
	// a writable tree; a snapshot volume ends read-only.
	Commit(ctx context.Context) error
	// Close removes the passes' leftovers on this end; without a successful
	// Commit it also removes vol, so a failed receive leaves nothing. Safe
	// to call more than once. It runs to the end even if ctx is cancelled.
	Close(ctx context.Context) error
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
