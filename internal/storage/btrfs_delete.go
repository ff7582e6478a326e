package storage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// btrfsFirstFreeObjectID is the inode number of every subvolume's root
// directory (BTRFS_FIRST_FREE_OBJECTID); no other directory has it.
const btrfsFirstFreeObjectID = 256

// deleteTree deletes the subvolume (or plain directory) at path together
// with every subvolume nested in it, deepest first.
//
// Kernel behaviour this works around:
//   - deleting a subvolume that still holds nested subvolumes fails with
//     ENOTEMPTY;
//   - a nested subvolume cannot be unlinked from a read-only parent (EROFS),
//     although root may delete a read-only subvolume itself.
//
// Most volumes hold no nested subvolume, so one plain delete is tried first;
// only if it fails is the volume made writable and walked for nested
// subvolumes, which costs a stat of every directory in it.
func (d *btrfsDriver) deleteTree(ctx context.Context, path string) error {
	sub, err := isSubvolume(path)
	if err != nil {
		return err
	}
	if sub {
		if d.tool.subvolumeDelete(ctx, path) == nil {
			return nil
		}
		if err := d.tool.setReadOnly(ctx, path, false, propertySetOpts{Force: true}); err != nil {
			return err
		}
	}
	nested, err := nestedSubvolumes(ctx, path)
	if err != nil {
		return err
	}
	for _, n := range nested {
		if err := d.deleteTree(ctx, n); err != nil {
			return err
		}
	}
	if sub {
		return d.tool.subvolumeDelete(ctx, path)
	}
	// A plain directory where a volume should be: the remains of a
	// failed operation.
	return os.RemoveAll(path)
}

// isSubvolume reports whether path is the root directory of a btrfs
// subvolume. path must be on btrfs.
func isSubvolume(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Ino == btrfsFirstFreeObjectID, nil
}

// nestedSubvolumes returns the subvolumes directly nested in the tree at
// root: it does not descend into the subvolumes it finds, nor into mount
// points (the delete then fails with EBUSY, as it should). The walk
// follows no symlink (walkTree); the paths it returns are those of a
// stopped container's tree, which nothing changes meanwhile.
func nestedSubvolumes(ctx context.Context, root string) ([]string, error) {
	var found []string
	err := walkTree(ctx, root, func(e *treeEntry) (bool, error) {
		switch {
		case e.st.Mode&unix.S_IFMT != unix.S_IFDIR || e.mountRoot:
			return false, nil
		case e.rel != "" && e.st.Ino == btrfsFirstFreeObjectID:
			found = append(found, filepath.Join(root, filepath.FromSlash(e.rel)))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("find nested subvolumes in %s: %w", root, err)
	}
	return found, nil
}
