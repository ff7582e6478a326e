package storage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// testPoolSize is the size of the loop-backed btrfs filesystems tests make.
const testPoolSize = 1 << 30

// scratchBtrfs formats a btrfs image in a temporary directory and mounts it
// (through an autoclear loop device), the way an administrator would prepare
// a filesystem for a Source pool. The mount and the loop device are gone when
// the test ends, pass or fail.
func scratchBtrfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	image, mnt := filepath.Join(dir, "scratch.img"), filepath.Join(dir, "mnt")
	if err := createSparse(image, testPoolSize); err != nil {
		t.Fatal(err)
	}
	if err := newBtrfsTool().mkfs(t.Context(), image, mkfsOpts{Label: "scratch"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, err := attachLoop(image, loopAttachOpts{Autoclear: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := unix.Mount(dev.Path, mnt, "btrfs", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev.Path, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount scratch btrfs: %v", err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		checkReleased(t, image, mnt)
	})
	return mnt
}

// checkReleased fails the test if a loop device is still bound to image or
// anything is mounted at mnt, and releases them so no test leaks them.
func checkReleased(t *testing.T, image, mnt string) {
	t.Helper()
	if m, err := mountedAt(mnt); err != nil || m {
		t.Errorf("%s still mounted after cleanup (err %v)", mnt, err)
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	devs, err := findLoops(image)
	if err != nil {
		t.Error(err)
	}
	for _, dev := range devs {
		if gone, _ := waitLoopUnbound(context.Background(), dev, loopReleaseTimeout); gone {
			continue
		}
		t.Errorf("loop device %s still bound to %s after cleanup", dev, image)
		if err := detachLoop(dev); err != nil {
			t.Error(err)
		}
	}
}

// mountedAt reports whether path is a mount point.
func mountedAt(path string) (bool, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return isMountRoot(&st), nil
}

// onBtrfs reports whether path is on a btrfs filesystem.
func onBtrfs(t *testing.T, path string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.BTRFS_SUPER_MAGIC
}

// treeListing describes every entry under root (type, permissions,
// ownership, size, content hash, symlink target, hard-link group), keyed by
// relative path, so two trees can be compared.
func treeListing(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{} // first path seen for each multiply-linked inode
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d rdev=%d", st.Mode, st.Uid, st.Gid, st.Rdev)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha=%x", st.Size, sha256.Sum256(b))
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					desc += " linkof=" + first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " target=" + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeFile writes content to path, creating parent directories, and syncs
// it so its blocks are allocated.
func writeFile(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// transferListing is treeListing with every entry's modification time.
func transferListing(t *testing.T, root string) map[string]string {
	t.Helper()
	out := treeListing(t, root)
	for rel := range out {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, rel), &st); err != nil {
			t.Fatal(err)
		}
		out[rel] += fmt.Sprintf(" mtime=%d", st.Mtim.Nano())
	}
	return out
}

// checkSameTree fails the test unless the trees at want and got are equal.
func checkSameTree(t *testing.T, what, want, got string) {
	t.Helper()
	w, g := transferListing(t, want), transferListing(t, got)
	for _, p := range slices.Sorted(maps.Keys(w)) {
		if g[p] != w[p] {
			t.Errorf("%s: %q: source %q, target %q", what, p, w[p], g[p])
		}
	}
	for _, p := range slices.Sorted(maps.Keys(g)) {
		if _, ok := w[p]; !ok {
			t.Errorf("%s: %q: only on the target: %q", what, p, g[p])
		}
	}
}
