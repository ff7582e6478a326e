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
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The receiving side of a tar-sync pass (see dir_sync.go for the format):
// entries applied under the volume root, deletions, directory times.

// applyPass reads a pass from r and applies it to the tree at root, which
// exists. A stream that is not a tar-sync/1 pass, or one cut short, gives
// an error wrapping ErrTransferFormat.
func applyPass(ctx context.Context, root string, r io.Reader) error {
	tr := tar.NewReader(r)
	if err := readFormat(tr); err != nil {
		return err
	}
	a := &applier{root: root, touched: map[string]unix.Timespec{}}
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

// applier applies the entries and deletions of one pass to the tree at
// root, then gives directories their times: the pass's directory entries
// theirs, and the directories it changed without an entry for them (a
// file replaced in a directory that did not change on the source) back
// the times they had.
type applier struct {
	root    string
	dirs    []*tar.Header            // directory entries, in stream order
	touched map[string]unix.Timespec // directory -> its mtime before the pass changed it
}

// entry applies one entry.
func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	p, err := entryPath(a.root, hdr.Name)
	if err != nil {
		return err
	}
	if hdr.PAXRecords[metaRecord] != "" {
		return applyMeta(p, hdr)
	}
	if p != a.root {
		if err := a.touch(filepath.Dir(p)); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		a.dirs = append(a.dirs, hdr)
	}
	return applyEntry(a.root, p, hdr, r)
}

// touch records dir's modification time before the pass first changes it.
func (a *applier) touch(dir string) error {
	if _, ok := a.touched[dir]; ok {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
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
	for _, rel := range strings.Split(list, "\x00") {
		p, err := entryPath(a.root, rel)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || p == a.root {
			continue
		}
		if err == nil {
			err = a.touch(filepath.Dir(p))
		}
		if err == nil {
			err = os.RemoveAll(p)
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", rel, err)
		}
	}
	return nil
}

// setDirTimes restores the times of the directories the pass changed, then
// sets those of its directory entries, last entry first.
func (a *applier) setDirTimes() error {
	for dir, mtime := range a.touched {
		err := unix.UtimesNanoAt(unix.AT_FDCWD, dir, []unix.Timespec{mtime, mtime}, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "utimensat", Path: dir, Err: err}
		}
	}
	for i := len(a.dirs) - 1; i >= 0; i-- {
		p, err := entryPath(a.root, a.dirs[i].Name)
		if err == nil {
			err = setTimes(p, a.dirs[i].ModTime)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.dirs[i].Name, err)
		}
	}
	return nil
}

// entryPath returns the path of the tar entry name under root, without
// resolving its last element. Every element before it must be a directory,
// not a symlink, as the sender's walk found it: nothing is ever written
// or deleted through a symlink the tree holds.
func entryPath(root, name string) (string, error) {
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if rel == "" {
		return root, nil
	}
	elems := strings.Split(rel, "/")
	p := root
	for _, e := range elems[:len(elems)-1] {
		p = filepath.Join(p, e)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			return "", &fs.PathError{Op: "lookup", Path: p, Err: unix.ENOTDIR}
		}
	}
	return filepath.Join(p, elems[len(elems)-1]), nil
}

// applyMeta gives the regular file at p the metadata of a metadata-only
// entry.
func applyMeta(p string, hdr *tar.Header) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("metadata of a regular file for a %s: %w", fi.Mode().Type(), ErrTransferFormat)
	}
	return setMeta(p, hdr)
}

// applyEntry creates or replaces the entry at p.
func applyEntry(root, p string, hdr *tar.Header, r io.Reader) error {
	// Replace what is there unless it is a directory staying one.
	if fi, err := os.Lstat(p); err == nil && p != root && (!fi.IsDir() || hdr.Typeflag != tar.TypeDir) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	done, err := createEntry(root, p, hdr, r)
	if err != nil || done {
		return err
	}
	return setMeta(p, hdr)
}

// createEntry creates the inode of one entry at p. done says the entry
// needs no metadata set (a hard link, a type this format skips).
func createEntry(root, p string, hdr *tar.Header, r io.Reader) (done bool, err error) {
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, os.FileMode(mode)); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, err
		}
	case tar.TypeReg:
		return false, createFile(p, os.FileMode(mode), r)
	case tar.TypeSymlink:
		return false, os.Symlink(hdr.Linkname, p)
	case tar.TypeLink:
		target, err := entryPath(root, hdr.Linkname)
		if err != nil {
			return false, err
		}
		return true, os.Link(target, p)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			kind = unix.S_IFCHR
		case tar.TypeBlock:
			kind = unix.S_IFBLK
		}
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		if err := unix.Mknod(p, kind|mode, dev); err != nil {
			return false, &fs.PathError{Op: "mknod", Path: p, Err: err}
		}
	default:
		return true, nil
	}
	return false, nil
}

// createFile creates the regular file p (which must not exist) with the
// content r holds.
func createFile(p string, mode os.FileMode, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setMeta gives an entry its owner, mode and modification time; p's last
// element is never followed if it is a symlink.
func setMeta(p string, hdr *tar.Header) error {
	if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	// chown clears setuid bits: the mode goes after it. A symlink has no
	// mode of its own. (unix.Chmod, not os.Chmod: os.FileMode(0o4755)
	// would lose the setuid bit.)
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Chmod(p, uint32(hdr.Mode&0o7777)); err != nil {
			return &fs.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	return setTimes(p, hdr.ModTime)
}

// setTimes sets p's access and modification times to t, to the
// nanosecond, without following a symlink.
func setTimes(p string, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
