package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// defaultPoolSize is the size of a new loop-backed pool image when
// Config.Size is 0. The image is sparse: it takes host space as it fills.
const defaultPoolSize = 10 << 30

// btrfsDriver keeps every volume as a btrfs subvolume, so clones are
// constant-time copy-on-write snapshots. The pool is either a btrfs
// filesystem on a loop-mounted image file that the driver creates and
// mounts (Config.Source and Config.Device empty), a btrfs filesystem on a
// block device that the driver mounts (Config.Device), or a directory on an
// existing btrfs filesystem (Config.Source) that the driver uses as it is.
//
// Pool mount and unmount are the caller's to serialize; volume operations on
// different volumes may run concurrently.
type btrfsDriver struct {
	tool     btrfsTool
	root     string // pool root: Config.Root, or Config.Source
	source   string // Config.Source; "" for a loop-backed or device pool
	device   string // Config.Device; "" for a loop-backed or source pool
	loopFile string // Config.LoopFile, when source and device are ""
	size     int64  // size of a new loop image
}

// newBtrfs returns a btrfs driver for cfg without touching the host.
func newBtrfs(cfg Config) (Driver, error) {
	d := &btrfsDriver{tool: newBtrfsTool(), size: cfg.Size}
	var err error
	if cfg.Source != "" && cfg.Device != "" {
		return nil, fmt.Errorf("btrfs Source and Device are exclusive: %w", ErrInvalidConfig)
	}
	if cfg.Source != "" {
		// An existing btrfs directory is the pool itself; Root is unused.
		if d.source, err = cleanAbs("btrfs Source", cfg.Source); err != nil {
			return nil, err
		}
		d.root = d.source
		return d, nil
	}
	if d.root, err = cleanAbs("btrfs Root", cfg.Root); err != nil {
		return nil, err
	}
	if cfg.Device != "" {
		if d.device, err = cleanAbs("btrfs Device", cfg.Device); err != nil {
			return nil, err
		}
		return d, nil
	}
	if d.loopFile, err = cleanAbs("btrfs LoopFile", cfg.LoopFile); err != nil {
		return nil, err
	}
	if cfg.Size < 0 {
		return nil, fmt.Errorf("btrfs Size %d is negative: %w", cfg.Size, ErrInvalidConfig)
	}
	if d.size == 0 {
		d.size = defaultPoolSize
	}
	return d, nil
}

// Info implements Driver.
func (d *btrfsDriver) Info() Info {
	return Info{Name: "btrfs", InstantClone: true, BlockBacked: true, TransferFormat: transferFormatBtrfs, DurableCommit: true}
}

// Path implements Driver. It returns "" for an invalid volume.
func (d *btrfsDriver) Path(vol Volume) string {
	return volumePath(d.root, vol)
}

// ListVolumes implements Driver.
func (d *btrfsDriver) ListVolumes(ctx context.Context, t VolumeType) ([]Volume, error) {
	return listVolumes(d.root, t)
}

// VolumeExists implements Driver.
func (d *btrfsDriver) VolumeExists(vol Volume) bool {
	return volumeExists(d.root, vol)
}

// CreateVolume implements Driver: it creates an empty subvolume.
func (d *btrfsDriver) CreateVolume(ctx context.Context, vol Volume) error {
	path, err := d.newVolumePath(vol)
	if err != nil {
		return err
	}
	if err := d.tool.subvolumeCreate(ctx, path); err != nil {
		_ = removeEmptyParent(vol, path)
		return fmt.Errorf("create %s: %w", vol, err)
	}
	return nil
}

// CloneVolume implements Driver: dst is a snapshot of src, read-only if
// readOnly, taken with one ioctl (constant time, no process started). Subvolumes nested in src are not cloned; they appear in dst as
// empty directories.
func (d *btrfsDriver) CloneVolume(ctx context.Context, dst, src Volume, readOnly bool) error {
	if err := validateVolume(src); err != nil {
		return err
	}
	if err := checkExisting(src, d.Path(src)); err != nil {
		return fmt.Errorf("clone %s: %w", dst, err)
	}
	path, err := d.newVolumePath(dst)
	if err != nil {
		return err
	}
	// The ioctl, not btrfs(8): a container may be frozen while this runs.
	if err := snapshotIoctl(d.Path(src), path, readOnly); err != nil {
		_ = removeEmptyParent(dst, path)
		return fmt.Errorf("clone %s from %s: %w", dst, src, err)
	}
	return nil
}

// newVolumePath checks that vol is valid and new and that the pool is
// mounted, creates vol's parent directory and returns vol's path.
func (d *btrfsDriver) newVolumePath(vol Volume) (string, error) {
	if err := validateVolume(vol); err != nil {
		return "", err
	}
	if err := d.checkMounted(); err != nil {
		return "", err
	}
	path := d.Path(vol)
	if err := checkNew(vol, path); err != nil {
		return "", err
	}
	return path, makeParent(path)
}

// SetReadOnly implements Driver by setting the subvolume's ro property.
// Making a received subvolume writable fails (it would break incremental
// receives into it).
func (d *btrfsDriver) SetReadOnly(ctx context.Context, vol Volume, readOnly bool) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	path := d.Path(vol)
	if err := checkExisting(vol, path); err != nil {
		return fmt.Errorf("set read-only: %w", err)
	}
	if err := d.tool.setReadOnly(ctx, path, readOnly, propertySetOpts{}); err != nil {
		return fmt.Errorf("set %s read-only=%t: %w", vol, readOnly, err)
	}
	return nil
}

// DeleteVolume implements Driver. It deletes subvolumes nested in vol too,
// and works whether vol and they are read-only or not.
func (d *btrfsDriver) DeleteVolume(ctx context.Context, vol Volume) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	path := d.Path(vol)
	ok, err := pathExists(path)
	if err != nil || !ok {
		return err
	}
	if err := d.deleteTree(ctx, path); err != nil {
		return fmt.Errorf("delete %s: %w", vol, err)
	}
	return removeEmptyParent(vol, path)
}

// VolumeUsage implements Driver with a du-like walk of the volume (btrfs
// quotas, which would be exact, are off: they slow down every snapshot and
// delete). Extents the volume shares with its origin or clones are counted
// fully.
func (d *btrfsDriver) VolumeUsage(ctx context.Context, vol Volume) (uint64, error) {
	return volumeUsage(ctx, d.root, vol)
}

// PoolUsage implements Driver from "btrfs filesystem usage": Total is the
// device size, Used counts every copy (metadata is kept twice), Free is
// btrfs's estimate for new data. A Source pool reports its whole
// filesystem.
func (d *btrfsDriver) PoolUsage(ctx context.Context) (Usage, error) {
	if err := d.checkMounted(); err != nil {
		return Usage{}, err
	}
	u, err := d.tool.filesystemUsage(ctx, d.root)
	if err != nil {
		return Usage{}, fmt.Errorf("pool usage: %w", err)
	}
	return Usage{Total: u.DeviceSize, Used: u.Used, Free: u.FreeEstimated}, nil
}

// BlockDevices implements Driver: the filesystem's member devices (a
// loop-backed pool's loop device first), then the whole disks under them.
func (d *btrfsDriver) BlockDevices(ctx context.Context) ([]string, error) {
	if err := d.checkMounted(); err != nil {
		return nil, err
	}
	return blockDevicesOf(d.root)
}

// Sync implements Driver with syncfs(2) of the pool.
func (d *btrfsDriver) Sync(ctx context.Context) error {
	return syncfs(d.root)
}

// checkMounted returns an error wrapping ErrNotMounted unless the pool root
// is on btrfs.
func (d *btrfsDriver) checkMounted() error {
	var st unix.Statfs_t
	err := unix.Statfs(d.root, &st)
	if err == nil && st.Type == unix.BTRFS_SUPER_MAGIC {
		return nil
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("btrfs pool %s: %w", d.root, ErrNotMounted)
	}
	return fmt.Errorf("btrfs pool %s: %w", d.root, err)
}
