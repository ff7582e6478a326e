package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/sparse"
)

// The receiving side of a tar-sync pass (see dir_sync.go for the format):
// entries applied under the volume root, deletions, directory times.
//
// A pass comes from a peer: nothing in it is trusted. Each entry's
// directory is looked up from an fd of the volume root with no symlink
// allowed on the way (openat2, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and
// the entry itself is made, changed or removed relative to that directory
// fd without following it if it is a symlink: nothing is ever written or
// deleted through a symlink the tree holds, nor outside the volume.

// applyPass reads a pass from r and applies it to the tree at root, which
// exists. A stream that is not a tar-sync/1 pass, or one cut short, gives
// an error wrapping ErrTransferFormat.
func applyPass(ctx context.Context, root string, r io.Reader) error {
	tr := tar.NewReader(r)
	if err := readFormat(tr); err != nil {
		return err
	}
	rootfd, err := openTreeRoot(root)
	if err != nil {
		return err
	}
	a := &applier{rootfd: rootfd, pfd: -1, touched: map[string]unix.Timespec{}}
	defer a.close()
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("pass cut short (no end record): %w", ErrTransferFormat)
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeXGlobalHeader {
			if err := a.entry(hdr, tr); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			continue
		}
		if _, end := hdr.PAXRecords[endRecord]; end {
			break
		}
		if err := a.deletes(hdr.PAXRecords[deletedRecord]); err != nil {
			return err
		}
	}
	// The tar trailer: read it, so a sender writing it is not left blocked.
	switch _, err := tr.Next(); {
	case err == nil:
		return fmt.Errorf("entries after the end record: %w", ErrTransferFormat)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("after the end record: %w", err)
	}
	return a.setDirTimes()
}

// readFormat reads a pass's first header, which names its format.
func readFormat(tr *tar.Reader) error {
	hdr, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("empty stream: %w", ErrTransferFormat)
	}
	if err != nil {
		return fmt.Errorf("not a %s pass: %w: %w", transferFormatDir, ErrTransferFormat, err)
	}
	if got := hdr.PAXRecords[formatRecord]; hdr.Typeflag != tar.TypeXGlobalHeader || got != transferFormatDir {
		return fmt.Errorf("not a %s pass (format %q): %w", transferFormatDir, got, ErrTransferFormat)
	}
	return nil
}

// applier applies the entries and deletions of one pass to the tree open
// as rootfd, then gives directories their times: the pass's directory
// entries theirs, and the directories it changed without an entry for them
// (a file replaced in a directory that did not change on the source) back
// the times they had. Paths are relative to the root, "" for the root.
type applier struct {
	rootfd  int
	dirs    []string                 // directory entries, in stream order
	times   map[string]time.Time     // directory entry -> its time
	touched map[string]unix.Timespec // directory -> its mtime before the pass changed it
	// The directory of the last entry, kept open: entries come parents
	// first, mostly many in one directory.
	prel string
	pfd  int
}

// close releases the applier's fds.
func (a *applier) close() {
	a.dropParent()
	unix.Close(a.rootfd)
}

// dropParent forgets the cached directory (after a removal, which may
// have taken it out of the tree).
func (a *applier) dropParent() {
	if a.pfd >= 0 {
		unix.Close(a.pfd)
	}
	a.prel, a.pfd = "", -1
}

// entryRel returns a tar entry's name as a clean path below the root.
func entryRel(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// at returns the directory holding rel, as an fd valid until the next
// call, and rel's last element in it; the root is (rootfd, ".").
func (a *applier) at(rel string) (int, string, error) {
	if rel == "" {
		return a.rootfd, ".", nil
	}
	dir, name := splitRel(rel)
	if dir == "" {
		return a.rootfd, name, nil
	}
	if a.pfd >= 0 && a.prel == dir {
		return a.pfd, name, nil
	}
	a.dropParent()
	fd, err := openBeneath(a.rootfd, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	a.prel, a.pfd = dir, fd
	return fd, name, nil
}

// entry applies one entry.
func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	rel := entryRel(hdr.Name)
	dirfd, name, err := a.at(rel)
	if err != nil {
		return err
	}
	if hdr.PAXRecords[metaRecord] != "" {
		return applyMeta(dirfd, name, hdr)
	}
	if rel != "" {
		dir, _ := splitRel(rel)
		if err := a.touch(dir, dirfd); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		if a.times == nil {
			a.times = map[string]time.Time{}
		}
		a.dirs = append(a.dirs, rel)
		a.times[rel] = hdr.ModTime
	}
	return a.applyEntry(dirfd, name, rel, hdr, r)
}

// touch records the modification time of dir (open as dirfd) before the
// pass first changes it.
func (a *applier) touch(dir string, dirfd int) error {
	if _, ok := a.touched[dir]; ok {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, "", &st, unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "fstat", Path: "/" + dir, Err: err}
	}
	a.touched[dir] = st.Mtim
	return nil
}

// deletes removes the NUL-separated paths in list. A path whose parent is
// gone or no longer a directory is gone already.
func (a *applier) deletes(list string) error {
	if list == "" {
		return nil
	}
	for _, name := range strings.Split(list, "\x00") {
		rel := entryRel(name)
		if rel == "" {
			continue
		}
		dirfd, base, err := a.at(rel)
		if gone(err) {
			continue
		}
		if err == nil {
			dir, _ := splitRel(rel)
			err = a.touch(dir, dirfd)
		}
		if err == nil {
			err = removeAt(dirfd, base)
			a.dropParent()
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return nil
}

// gone reports whether a lookup failed because a directory on the way is
// not there, or not a directory.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// setDirTimes restores the times of the directories the pass changed, then
// sets those of its directory entries, last entry first.
func (a *applier) setDirTimes() error {
	for dir, mtime := range a.touched {
		dirfd, name, err := a.at(dir)
		if err == nil {
			err = unix.UtimesNanoAt(dirfd, name, []unix.Timespec{mtime, mtime}, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil && !gone(err) {
			return &fs.PathError{Op: "utimensat", Path: "/" + dir, Err: err}
		}
	}
	for i := len(a.dirs) - 1; i >= 0; i-- {
		rel := a.dirs[i]
		dirfd, name, err := a.at(rel)
		if err == nil {
			err = setTimes(dirfd, name, a.times[rel])
		}
		if err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	}
	return nil
}

// applyMeta gives the regular file name in dirfd the metadata of a
// metadata-only entry.
func applyMeta(dirfd int, name string, hdr *tar.Header) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("metadata of a regular file for a %s: %w", fs.FileMode(st.Mode&unix.S_IFMT), ErrTransferFormat)
	}
	return setMeta(dirfd, name, hdr)
}

// applyEntry creates or replaces the entry name in dirfd (rel below the
// root).
func (a *applier) applyEntry(dirfd int, name, rel string, hdr *tar.Header, r io.Reader) error {
	// Replace what is there unless it is a directory staying one.
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && rel != "" && (st.Mode&unix.S_IFMT != unix.S_IFDIR || hdr.Typeflag != tar.TypeDir) {
		if err := removeAt(dirfd, name); err != nil {
			return err
		}
		if dirfd != a.pfd {
			a.dropParent() // it may have been inside what went
		}
	}
	done, err := a.createEntry(dirfd, name, hdr, r)
	if err != nil || done {
		return err
	}
	return setMeta(dirfd, name, hdr)
}

// createEntry creates the inode of one entry, name in dirfd. done says
// the entry needs no metadata set (a hard link, a type this format skips).
func (a *applier) createEntry(dirfd int, name string, hdr *tar.Header, r io.Reader) (done bool, err error) {
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(dirfd, name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return false, &fs.PathError{Op: "mkdirat", Path: name, Err: err}
		}
	case tar.TypeReg:
		return false, createFile(dirfd, name, mode, r)
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, dirfd, name); err != nil {
			return false, &fs.PathError{Op: "symlinkat", Path: name, Err: err}
		}
	case tar.TypeLink:
		return true, a.link(entryRel(hdr.Linkname), dirfd, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			kind = unix.S_IFCHR
		case tar.TypeBlock:
			kind = unix.S_IFBLK
		}
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		if err := unix.Mknodat(dirfd, name, kind|mode, dev); err != nil {
			return false, &fs.PathError{Op: "mknodat", Path: name, Err: err}
		}
	default:
		return true, nil
	}
	return false, nil
}

// link makes name in dirfd a hard link to target (below the root; a
// symlink there is linked itself, never followed).
func (a *applier) link(target string, dirfd int, name string) error {
	tdir, tname := splitRel(target)
	if tname == "" {
		return fmt.Errorf("hard link to the root: %w", ErrTransferFormat)
	}
	tfd, err := openBeneath(a.rootfd, tdir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := unix.Linkat(tfd, tname, dirfd, name, 0); err != nil {
		return &fs.PathError{Op: "linkat", Path: name, Err: err}
	}
	return nil
}

// createFile creates the regular file name in dirfd (which must not
// exist) with the content r holds, zero blocks left as holes (a VM's
// sparse disk arrives as zeros).
func createFile(dirfd int, name string, mode uint32, r io.Reader) error {
	fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = sparse.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setMeta gives the entry name in dirfd its owner, mode and modification
// time, never following it if it is a symlink.
func setMeta(dirfd int, name string, hdr *tar.Header) error {
	if err := unix.Fchownat(dirfd, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "fchownat", Path: name, Err: err}
	}
	// chown clears setuid bits: the mode goes after it. A symlink has no
	// mode of its own.
	if hdr.Typeflag != tar.TypeSymlink {
		if err := chmodAt(dirfd, name, uint32(hdr.Mode&0o7777)); err != nil {
			return err
		}
	}
	return setTimes(dirfd, name, hdr.ModTime)
}

// chmodAt sets the mode of name in dirfd, not following a symlink
// (fchmodat2, Linux 6.6). Without fchmodat2 it falls back to fchmodat,
// which follows one: the caller has just made name itself, not a symlink,
// and nothing else writes a tree being received.
func chmodAt(dirfd int, name string, mode uint32) error {
	err := unix.Fchmodat(dirfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = unix.Fchmodat(dirfd, name, mode, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "fchmodat", Path: name, Err: err}
	}
	return nil
}

// setTimes sets the access and modification times of name in dirfd to t,
// to the nanosecond, without following a symlink.
func setTimes(dirfd int, name string, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.UtimesNanoAt(dirfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimensat", Path: name, Err: err}
	}
	return nil
}
