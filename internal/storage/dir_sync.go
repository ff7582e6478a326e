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
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A dir driver's pass (format tar-sync/1) is a PAX tar stream, written
// here and applied by dir_sync_apply.go:
//
//  1. a global header whose record VESSEL.format names the format;
//  2. an entry for each inode of the tree that is new or changed since the
//     previous pass, parents before children: a directory, a regular file
//     (whole, or only its metadata when marked VESSEL.meta), a symlink, a
//     hard link to an earlier entry of the same pass, a device or a fifo;
//  3. global headers whose record VESSEL.deleted lists, NUL separated, the
//     paths deleted since the previous pass (not those inside a deleted
//     directory), at most deletedChunk bytes each;
//  4. a global header with the record VESSEL.end: tar alone cannot tell a
//     stream cut between two entries from a whole one.
const (
	transferFormatDir = "tar-sync/1"
	formatRecord      = "VESSEL.format"
	metaRecord        = "VESSEL.meta"
	deletedRecord     = "VESSEL.deleted"
	endRecord         = "VESSEL.end"
	// deletedChunk bounds one list of deleted paths, well below the 1 MiB
	// Go's tar reader accepts in one PAX header.
	deletedChunk = 256 << 10
)

// manifest records what the passes so far sent: each entry's path
// (relative to the volume root, "" for the root) and a stamp of its inode;
// the next pass sends only entries whose stamp changed.
type manifest map[string]stamp

// stamp is an entry's inode state as a pass compares it. The change time
// moves on every write and metadata change, so a changed file is always
// noticed. The zero stamp marks an entry sent incompletely (it changed
// while being read): it never matches, so the next pass sends it again.
type stamp struct {
	Mode    uint32
	Size    int64
	MtimeNs int64
	CtimeNs int64
	Ino     uint64
}

// errChanged says a file changed while a pass read it; the pass went on.
var errChanged = errors.New("changed while being sent")

// writePass writes a pass of the tree at root to w: everything that
// differs from prev (all of it when prev is nil). It returns the manifest
// of what it sent. The tree may be a running container's: it is read
// through fds from its root, never by path (see tree_at.go).
func writePass(ctx context.Context, root string, prev manifest, w io.Writer) (manifest, error) {
	rootfd, err := openTreeRoot(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootfd)
	tw := tar.NewWriter(w)
	if err := writeRecord(tw, formatRecord, transferFormatDir); err != nil {
		return nil, err
	}
	cur, err := writeChanges(ctx, tw, rootfd, prev)
	if err != nil {
		return nil, err
	}
	for _, chunk := range chunkPaths(deletedSince(prev, cur), deletedChunk) {
		if err := writeRecord(tw, deletedRecord, chunk); err != nil {
			return nil, err
		}
	}
	if err := writeRecord(tw, endRecord, "1"); err != nil {
		return nil, err
	}
	return cur, tw.Close()
}

// writeRecord writes a global header holding one PAX record.
func writeRecord(tw *tar.Writer, key, value string) error {
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "vessel", PAXRecords: map[string]string{key: value}})
}

// writeChanges walks the live tree at rootfd and writes an entry for each
// inode whose stamp differs from prev. Entries that disappear during the
// walk are skipped: the next pass reports them deleted. Regular files with
// several links go last, as groups (see linkGroup).
func writeChanges(ctx context.Context, tw *tar.Writer, rootfd int, prev manifest) (manifest, error) {
	cur := manifest{}
	groups := linkGroups{}
	err := walkTreeAt(ctx, rootfd, func(e *treeEntry) (bool, error) {
		st := &e.st
		s := stamp{Mode: st.Mode, Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Ino: st.Ino}
		old, seen := prev[e.rel]
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
			groups.add(e.rel, st, s, !seen || old != s)
			return true, nil
		}
		cur[e.rel] = s
		if seen && old == s {
			return true, nil
		}
		err := writeEntry(tw, e.dirfd, e.name, e.rel, st, metaOnly(old, seen, st))
		if errors.Is(err, errChanged) {
			cur[e.rel] = stamp{}
			return true, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	return cur, groups.write(tw, rootfd, cur)
}

// A linkGroup is the paths of one multiply-linked regular file found in a
// pass. If any of them changed, all are sent: the first whole, the others
// as hard links to it; and all get the stamp of the first one found, the
// oldest. Stamps taken one by one could differ if the file changed during
// the walk, and a later pass would then send the file anew (a new inode on
// the target) under some of its paths but not the others.
type linkGroup struct {
	rels    []string    // in walk order
	st      unix.Stat_t // of the first path
	stamp   stamp
	changed bool
}

// linkGroups are a pass's link groups by inode, in walk order.
type linkGroups struct {
	order []uint64
	byIno map[uint64]*linkGroup
}

// add adds a path to its inode's group.
func (gs *linkGroups) add(rel string, st *unix.Stat_t, s stamp, changed bool) {
	g := gs.byIno[st.Ino]
	if g == nil {
		if gs.byIno == nil {
			gs.byIno = map[uint64]*linkGroup{}
		}
		g = &linkGroup{st: *st, stamp: s}
		gs.byIno[st.Ino] = g
		gs.order = append(gs.order, st.Ino)
	}
	g.rels = append(g.rels, rel)
	g.changed = g.changed || changed
}

// write writes the entries of the groups that changed and records every
// group's paths in cur. The tree is the one open as rootfd.
func (gs *linkGroups) write(tw *tar.Writer, rootfd int, cur manifest) error {
	for _, ino := range gs.order {
		g := gs.byIno[ino]
		if g.changed {
			err := writeFirstLink(tw, rootfd, g.rels[0], &g.st)
			if errors.Is(err, errChanged) {
				g.stamp = stamp{}
			} else if err != nil {
				return err
			}
			for _, rel := range g.rels[1:] {
				if err := writeLink(tw, rel, g.rels[0], &g.st); err != nil {
					return err
				}
			}
		}
		for _, rel := range g.rels {
			cur[rel] = g.stamp
		}
	}
	return nil
}

// writeFirstLink writes the entry of rel, the first path of a link group,
// found again from the root: its directory is looked up with no symlink
// allowed on the way. A directory gone or replaced since the walk makes
// the file's content errChanged.
func writeFirstLink(tw *tar.Writer, rootfd int, rel string, st *unix.Stat_t) error {
	dir, name := splitRel(rel)
	dirfd, err := openBeneath(rootfd, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		dirfd = -1 // writeContent pads the content and says errChanged
	} else {
		defer unix.Close(dirfd)
	}
	return writeEntry(tw, dirfd, name, rel, st, false)
}

// skipVanished ignores an error saying an entry is gone.
func skipVanished(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// metaOnly reports whether a changed entry needs only its metadata sent:
// rsync's quick check (the same inode, size and modification time mean the
// same content) on a regular file with one link (one with more goes as a
// link group).
func metaOnly(old stamp, seen bool, st *unix.Stat_t) bool {
	return seen && old.Ino == st.Ino && old.Size == st.Size && old.MtimeNs == st.Mtim.Nano() &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1
}

// writeEntry writes one inode of the tree, name in the directory dirfd,
// as a tar entry. It returns errChanged if a regular file changed so that
// its content could not be sent as announced (it was padded with zeros).
func writeEntry(tw *tar.Writer, dirfd int, name, rel string, st *unix.Stat_t, metaOnly bool) error {
	hdr := entryHeader(rel, st)
	if metaOnly {
		hdr.Typeflag = tar.TypeReg
		hdr.PAXRecords = map[string]string{metaRecord: "1"}
		return tw.WriteHeader(hdr)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
	case unix.S_IFLNK:
		target, err := readlinkAt(dirfd, name)
		if err != nil {
			return skipVanished(err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case unix.S_IFREG:
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	default:
		return nil // sockets are not part of a filesystem's content
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	return writeContent(tw, dirfd, name, st)
}

// readlinkAt returns the target of the symlink name in dirfd.
func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlinkat", Path: name, Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// writeLink writes an entry making rel a hard link to first, sent earlier
// in the pass.
func writeLink(tw *tar.Writer, rel, first string, st *unix.Stat_t) error {
	hdr := entryHeader(rel, st)
	hdr.Typeflag, hdr.Linkname = tar.TypeLink, "./"+first
	return tw.WriteHeader(hdr)
}

// entryHeader returns the header of rel with st's metadata.
func entryHeader(rel string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name: "./" + rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX,
	}
}

// writeContent writes the st.Size bytes of the regular file name in the
// directory dirfd (-1: its directory is gone). The file is opened without
// following a symlink and must be the inode st describes. A file that
// grows while we copy it is sent at the size announced; one that shrank,
// vanished or was replaced is padded with zeros (errChanged). The next
// pass sees its new stamp and sends it again.
func writeContent(w io.Writer, dirfd int, name string, st *unix.Stat_t) error {
	var n int64
	err := error(unix.ENOENT)
	if dirfd >= 0 {
		// O_NONBLOCK: if it became a fifo, opening it must not wait for a writer.
		var fd int
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			f := os.NewFile(uintptr(fd), name)
			var now unix.Stat_t
			if err = unix.Fstat(fd, &now); err == nil && (now.Ino != st.Ino || now.Dev != st.Dev) {
				err = errChanged
			}
			if err == nil {
				n, err = io.CopyN(w, f, st.Size)
			}
			f.Close()
		}
	}
	if err == nil {
		return nil
	}
	// ENOENT: it vanished; ELOOP: a symlink now; ENXIO: a socket now.
	if !errors.Is(err, io.EOF) && !errors.Is(err, errChanged) && !errors.Is(err, unix.ENOENT) &&
		!errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := io.CopyN(w, zeros{}, st.Size-n); err != nil {
		return err
	}
	return errChanged
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// deletedSince returns, sorted, the paths in prev but not in cur, leaving
// out those inside a deleted directory (deleting it deletes them).
func deletedSince(prev, cur manifest) []string {
	gone := func(p string) bool {
		_, had := prev[p]
		_, has := cur[p]
		return had && !has
	}
	var deleted []string
outer:
	for p := range prev {
		if !gone(p) {
			continue
		}
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if gone(dir) {
				continue outer
			}
		}
		deleted = append(deleted, p)
	}
	sort.Strings(deleted)
	return deleted
}

// chunkPaths joins paths with NUL (the one byte no path holds) into
// strings of at most max bytes (a longer path goes alone).
func chunkPaths(paths []string, max int) []string {
	var chunks []string
	var b strings.Builder
	for _, p := range paths {
		if b.Len() > 0 && b.Len()+1+len(p) > max {
			chunks = append(chunks, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(0)
		}
		b.WriteString(p)
	}
	if b.Len() > 0 {
		chunks = append(chunks, b.String())
	}
	return chunks
}
