package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// One way into a volume's tree. A container volume is written by the
// container's root while the host reads it (usage, pre-copy of a running
// container) and a received pass is written from a peer's stream, so no
// access here goes by a joined host path: a directory swapped for a symlink
// between two steps would take it out of the tree. Every lookup starts at
// an fd of the volume root and goes one element at a time (openat with
// O_NOFOLLOW), or by openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS,
// which refuses any symlink on the way and anything outside the root.

// resolveBeneath is openat2's resolve mask for lookups in a tree: no
// symlink (nor /proc magic link) on the way, nothing outside the root.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openTreeRoot opens the directory at p, the root of a volume's tree, as a
// directory fd (p's last element is not followed if it is a symlink).
func openTreeRoot(p string) (int, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// openBeneath opens rel (a slash-separated path below the tree at rootfd,
// "" for the root itself) with flags, failing with ELOOP if any element
// of it is a symlink (the last one too, unless flags has O_PATH and the
// caller wants the link itself: openat2 never follows it then either).
func openBeneath(rootfd int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolveBeneath}
	for {
		fd, err := unix.Openat2(rootfd, rel, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue // EAGAIN: a concurrent rename elsewhere in the tree
		}
		if err != nil {
			return -1, &fs.PathError{Op: "openat2", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// splitRel splits a cleaned relative path into its parent ("" for the
// root) and last element.
func splitRel(rel string) (dir, name string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// treeEntry is one inode a tree walk visits.
type treeEntry struct {
	dirfd int    // the directory holding it (for the root: the root's own fd)
	name  string // its name in dirfd ("" for the root)
	rel   string // its path below the root ("" for the root)
	st    unix.Stat_t
	// mountRoot says the entry is the root of a mount (the walk does not
	// enter it).
	mountRoot bool
}

// walkTree calls fn for every inode of the tree at root, parents before
// children and names in lexical order, without ever following a symlink:
// each directory is opened from its parent's fd with O_NOFOLLOW and must
// be the inode fn was shown, so a directory swapped for a symlink or for
// another directory mid-walk is not entered (the next walk sees the
// change). Entries that vanish during the walk are skipped. fn returns
// whether to enter a directory; the walk never enters a mount point.
func walkTree(ctx context.Context, root string, fn func(e *treeEntry) (enter bool, err error)) error {
	fd, err := openTreeRoot(root)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return walkTreeAt(ctx, fd, fn)
}

// walkTreeAt is walkTree of the tree whose root is open as rootfd.
func walkTreeAt(ctx context.Context, rootfd int, fn func(e *treeEntry) (enter bool, err error)) error {
	w := &treeWalk{ctx: ctx, fn: fn}
	return w.visit(rootfd, "", "", rootfd)
}

// treeWalk is one walkTree.
type treeWalk struct {
	ctx     context.Context
	fn      func(*treeEntry) (bool, error)
	visited int
}

// visit stats name in dirfd (self, if not -1, is the entry's own fd: the
// root) and walks it.
func (w *treeWalk) visit(dirfd int, name, rel string, self int) error {
	if w.visited++; w.visited%ctxCheckEvery == 0 {
		if err := w.ctx.Err(); err != nil {
			return err
		}
	}
	e := &treeEntry{dirfd: dirfd, name: name, rel: rel}
	var stx unix.Statx_t
	const mask = unix.STATX_BASIC_STATS
	var err error
	if self >= 0 {
		err = unix.Statx(self, "", unix.AT_EMPTY_PATH, mask, &stx)
	} else {
		err = unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, mask, &stx)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) && self < 0 {
			return nil
		}
		return &fs.PathError{Op: "statx", Path: "/" + rel, Err: err}
	}
	e.st = statFromStatx(&stx)
	e.mountRoot = rel != "" && isMountRoot(&stx)
	enter, err := w.fn(e)
	if err != nil || !enter || e.mountRoot || e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return err
	}
	if self >= 0 {
		return w.children(self, rel, &e.st)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// ENOENT: gone; ELOOP, ENOTDIR: no longer a directory.
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return &fs.PathError{Op: "openat", Path: "/" + rel, Err: err}
	}
	defer unix.Close(fd)
	return w.children(fd, rel, &e.st)
}

// children walks the entries of the directory open as fd, if it is still
// the inode st describes.
func (w *treeWalk) children(fd int, rel string, st *unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return &fs.PathError{Op: "fstat", Path: "/" + rel, Err: err}
	}
	if now.Ino != st.Ino || now.Dev != st.Dev {
		return nil // replaced since its stat
	}
	names, err := readNames(fd)
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: "/" + rel, Err: err}
	}
	for _, n := range names {
		if err := w.visit(fd, n, path.Join(rel, n), -1); err != nil {
			return err
		}
	}
	return nil
}

// readNames returns the names in the directory open as fd, sorted. It
// reads through a duplicate, so fd itself stays open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// isMountRoot reports whether st (from statx) is the root of a mount.
func isMountRoot(st *unix.Statx_t) bool {
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 &&
		st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// statFromStatx converts statx's answer to a stat(2) one.
func statFromStatx(x *unix.Statx_t) unix.Stat_t {
	return unix.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    unix.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:    unix.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:    unix.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
}

// removeAt removes name in the directory dirfd and, if it is a directory,
// everything in it, without following any symlink.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return fmt.Errorf("unlink %s: %w", name, err)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	names, err := readNames(fd)
	for _, n := range names {
		if err == nil {
			err = removeAt(fd, n)
		}
	}
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", name, err)
	}
	return nil
}
