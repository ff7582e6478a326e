package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// volumeMode is the mode of a new volume's root directory.
const volumeMode = 0o755

// dirDriver keeps every volume as a plain directory under Root. It works on
// any filesystem; clones are full copies (sharing extents where the
// filesystem supports reflinks), and read-only is not enforced.
type dirDriver struct {
	cp   cpTool
	root string
}

// newDir returns a dir driver for cfg without touching the host. Only
// cfg.Root is used.
func newDir(cfg Config) (Driver, error) {
	root, err := cleanAbs("dir Root", cfg.Root)
	if err != nil {
		return nil, err
	}
	return &dirDriver{cp: newCpTool(), root: root}, nil
}

// Info implements Driver.
func (d *dirDriver) Info() Info {
	return Info{Name: "dir", TransferFormat: transferFormatDir}
}

// Mount implements Driver: it creates Root and the pool layout.
func (d *dirDriver) Mount(ctx context.Context) error {
	if err := os.MkdirAll(d.root, layoutMode); err != nil {
		return fmt.Errorf("create pool: %w", err)
	}
	return makeLayout(d.root)
}

// Unmount implements Driver: there is nothing to release.
func (d *dirDriver) Unmount(ctx context.Context) error {
	return nil
}

// Path implements Driver. It returns "" for an invalid volume.
func (d *dirDriver) Path(vol Volume) string {
	return volumePath(d.root, vol)
}

// ListVolumes implements Driver.
func (d *dirDriver) ListVolumes(ctx context.Context, t VolumeType) ([]Volume, error) {
	return listVolumes(d.root, t)
}

// VolumeExists implements Driver.
func (d *dirDriver) VolumeExists(vol Volume) bool {
	return volumeExists(d.root, vol)
}

// CreateVolume implements Driver: it creates an empty directory.
func (d *dirDriver) CreateVolume(ctx context.Context, vol Volume) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	path := d.Path(vol)
	if err := makeParent(path); err != nil {
		return err
	}
	err := os.Mkdir(path, volumeMode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", vol, ErrVolumeExists)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", vol, err)
	}
	// Mkdir's mode went through the umask.
	if err := os.Chmod(path, volumeMode); err != nil {
		return fmt.Errorf("create %s: %w", vol, err)
	}
	return nil
}

// CloneVolume implements Driver with a full copy (cp --archive
// --reflink=auto) made in the pool's staging directory and renamed into
// place, so dst never exists half-copied. readOnly is ignored: the dir
// driver does not enforce read-only.
func (d *dirDriver) CloneVolume(ctx context.Context, dst, src Volume, readOnly bool) error {
	if err := validateVolume(src); err != nil {
		return err
	}
	if err := validateVolume(dst); err != nil {
		return err
	}
	if err := checkExisting(src, d.Path(src)); err != nil {
		return fmt.Errorf("clone %s: %w", dst, err)
	}
	if err := checkNew(dst, d.Path(dst)); err != nil {
		return err
	}
	stage, err := d.stage("clone-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, "volume")
	if err := d.cp.copyTree(ctx, d.Path(src), tmp, copyOpts{Reflink: "auto"}); err != nil {
		return fmt.Errorf("clone %s from %s: %w", dst, src, err)
	}
	if err := makeParent(d.Path(dst)); err != nil {
		return err
	}
	if err := renameNoReplace(tmp, d.Path(dst)); err != nil {
		_ = removeEmptyParent(dst, d.Path(dst))
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("clone %s: %w", dst, ErrVolumeExists) // created meanwhile
		}
		return fmt.Errorf("clone %s from %s: %w", dst, src, err)
	}
	return nil
}

// SetReadOnly implements Driver. It only checks that vol exists: the dir
// driver does not enforce read-only (a read-only bind mount would not
// survive a reboot, and chattr +i on every file would make clones and
// deletes slow and fragile).
func (d *dirDriver) SetReadOnly(ctx context.Context, vol Volume, readOnly bool) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	if err := checkExisting(vol, d.Path(vol)); err != nil {
		return fmt.Errorf("set read-only: %w", err)
	}
	return nil
}

// DeleteVolume implements Driver. The volume is first renamed into the
// staging directory, so it disappears at once even if removing its files
// takes long or fails half-way.
func (d *dirDriver) DeleteVolume(ctx context.Context, vol Volume) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	path := d.Path(vol)
	ok, err := pathExists(path)
	if err != nil || !ok {
		return err
	}
	stage, err := d.stage("delete-")
	if err != nil {
		return err
	}
	doomed := filepath.Join(stage, "volume")
	if err := os.Rename(path, doomed); err != nil {
		os.Remove(stage)
		return fmt.Errorf("delete %s: %w", vol, err)
	}
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("delete %s: %w", vol, err)
	}
	return removeEmptyParent(vol, path)
}

// stage creates a new directory in the pool's staging directory.
func (d *dirDriver) stage(prefix string) (string, error) {
	dir := filepath.Join(d.root, stagingDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create staging directory: %w", err)
	}
	stage, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		return "", fmt.Errorf("create staging directory: %w", err)
	}
	return stage, nil
}

// VolumeUsage implements Driver with a du-like walk of the volume.
func (d *dirDriver) VolumeUsage(ctx context.Context, vol Volume) (uint64, error) {
	return volumeUsage(ctx, d.root, vol)
}

// PoolUsage implements Driver with the usage of the filesystem holding
// Root, which the pool shares with whatever else is on it.
func (d *dirDriver) PoolUsage(ctx context.Context) (Usage, error) {
	return statfsUsage(d.root)
}

// BlockDevices implements Driver: the whole disks under the filesystem
// holding Root.
func (d *dirDriver) BlockDevices(ctx context.Context) ([]string, error) {
	return blockDevicesOf(d.root)
}

// Sync implements Driver with syncfs(2) of the filesystem holding Root.
func (d *dirDriver) Sync(ctx context.Context) error {
	return syncfs(d.root)
}

// renameNoReplace renames oldpath to newpath, failing with EEXIST if
// newpath exists (a plain rename would replace an empty directory).
// Filesystems without RENAME_NOREPLACE get a check-then-rename.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		if err != nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
		}
		return nil
	}
	if ok, err := pathExists(newpath); err != nil || ok {
		if ok {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: unix.EEXIST}
		}
		return err
	}
	return os.Rename(oldpath, newpath)
}
