package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ctxCheckEvery is how many entries a tree walk visits between checks of
// its context.
const ctxCheckEvery = 1024

// treeUsage returns the bytes allocated to the tree at root, like "du -s":
// each inode's allocated blocks counted once, however many hard links it
// has. It stays on root's filesystem (it does not enter mount points; btrfs
// subvolumes are not mount points, so nested ones are counted).
//
// Extents shared with other trees (btrfs snapshots and clones, reflinks) are
// counted fully in each tree that references them, so the usages of a
// volume and its clones add up to more than the pool uses.
func treeUsage(ctx context.Context, root string) (uint64, error) {
	var total uint64
	linked := map[[2]uint64]bool{} // dev, ino of inodes with several links
	visited := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return vanished(path, root, err)
		}
		if visited++; visited%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var st unix.Statx_t
		const mask = unix.STATX_TYPE | unix.STATX_INO | unix.STATX_NLINK | unix.STATX_BLOCKS
		if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, mask, &st); err != nil {
			return vanished(path, root, &fs.PathError{Op: "statx", Path: path, Err: err})
		}
		if path != root && isMountRoot(&st) {
			return fs.SkipDir
		}
		if !d.IsDir() && st.Nlink > 1 {
			key := [2]uint64{unix.Mkdev(st.Dev_major, st.Dev_minor), st.Ino}
			if linked[key] {
				return nil
			}
			linked[key] = true
		}
		total += st.Blocks * 512 // st_blocks is in 512-byte units whatever the block size
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("disk usage of %s: %w", root, err)
	}
	return total, nil
}

// vanished forgives err if it says that path, below root, was removed while
// the tree was walked (a running container changes its files).
func vanished(path, root string, err error) error {
	if path != root && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// isMountRoot reports whether st (from statx) is the root of a mount.
func isMountRoot(st *unix.Statx_t) bool {
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 &&
		st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// statfsUsage returns the usage of the filesystem holding path as statfs(2)
// sees it. Free is what unprivileged users may still use (f_bavail).
func statfsUsage(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, fmt.Errorf("pool usage: statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return Usage{
		Total: st.Blocks * bs,
		Used:  (st.Blocks - st.Bfree) * bs,
		Free:  st.Bavail * bs,
	}, nil
}
