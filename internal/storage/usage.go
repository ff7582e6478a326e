package storage

import (
	"context"
	"fmt"

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
	err := walkTree(ctx, root, func(e *treeEntry) (bool, error) {
		if e.mountRoot {
			return false, nil
		}
		isDir := e.st.Mode&unix.S_IFMT == unix.S_IFDIR
		if !isDir && e.st.Nlink > 1 {
			key := [2]uint64{e.st.Dev, e.st.Ino}
			if linked[key] {
				return false, nil
			}
			linked[key] = true
		}
		total += uint64(e.st.Blocks) * 512 // st_blocks is in 512-byte units whatever the block size
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("disk usage of %s: %w", root, err)
	}
	return total, nil
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
