package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// metaRecord marks a regular file entry that carries only metadata (mode,
// owner, times): its content is unchanged since the previous pass.
const metaRecord = "VESSEL.meta"

// deletedRecord is the PAX record of a sync stream's trailing global
// header that lists, newline separated, the paths deleted since the
// previous pass.
const deletedRecord = "VESSEL.deleted"

// SyncVolume implements TreeSyncer: a walk of the live tree, a tar entry
// for each new or changed inode (hard links within the pass as links),
// then a global header listing what disappeared.
func (d *dirDriver) SyncVolume(ctx context.Context, vol Volume, prev Manifest, w io.Writer) (Manifest, error) {
	root := d.Path(vol)
	if err := checkExisting(vol, root); err != nil {
		return nil, fmt.Errorf("sync %s: %w", vol, err)
	}
	tw := tar.NewWriter(w)
	cur := Manifest{}
	links := map[uint64]string{} // inode -> first path sent in this pass
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while we walk: the next pass says so
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			rel = ""
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		stamp := Stamp{Mode: st.Mode, Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Ino: st.Ino}
		cur[rel] = stamp
		old, seen := prev[rel]
		if seen && old == stamp {
			return nil
		}
		// rsync's quick check: the same inode, size and modification time
		// mean the same content; only metadata changed.
		metaOnly := seen && old.Ino == stamp.Ino && old.Size == stamp.Size && old.MtimeNs == stamp.MtimeNs &&
			st.Mode&unix.S_IFMT == unix.S_IFREG
		return writeEntry(tw, path, rel, &st, links, metaOnly)
	})
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", vol, err)
	}
	var deleted []string
	for p := range prev {
		if _, ok := cur[p]; !ok {
			deleted = append(deleted, p)
		}
	}
	sort.Strings(deleted)
	if len(deleted) > 0 {
		hdr := &tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "deleted",
			PAXRecords: map[string]string{deletedRecord: strings.Join(deleted, "\n")}}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	return cur, tw.Close()
}

// writeEntry writes one inode of the tree as a tar entry.
func writeEntry(tw *tar.Writer, path, rel string, st *unix.Stat_t, links map[uint64]string, metaOnly bool) error {
	name := "./" + rel
	hdr := &tar.Header{
		Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX,
	}
	if metaOnly {
		hdr.Typeflag = tar.TypeReg
		hdr.PAXRecords = map[string]string{metaRecord: "1"}
		return tw.WriteHeader(hdr)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
	case unix.S_IFLNK:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, "./"+first
				return tw.WriteHeader(hdr)
			}
			links[st.Ino] = rel
		}
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
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// A file that grows while we copy it is sent at the size we announced;
	// the next pass sees its new stamp and sends it again.
	_, err = io.CopyN(tw, f, hdr.Size)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s shrank while being sent", rel)
	}
	return err
}

// ApplySync implements TreeSyncer.
func (d *dirDriver) ApplySync(ctx context.Context, vol Volume, r io.Reader) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	root := d.Path(vol)
	if err := os.MkdirAll(root, volumeMode); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var dirs []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("apply sync to %s: %w", vol, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			if err := applyDeletes(root, hdr.PAXRecords[deletedRecord]); err != nil {
				return err
			}
			continue
		}
		if err := applyEntry(root, hdr, tr); err != nil {
			return fmt.Errorf("apply sync to %s: %s: %w", vol, hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, hdr)
		}
	}
	// Directory times last: creating their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		p, err := securejoin.SecureJoin(root, dirs[i].Name)
		if err == nil {
			_ = unix.Lutimes(p, []unix.Timeval{unix.NsecToTimeval(dirs[i].ModTime.UnixNano()), unix.NsecToTimeval(dirs[i].ModTime.UnixNano())})
		}
	}
	return nil
}

// applyEntry creates or replaces one entry under root; paths resolve inside
// root whatever symlinks the tree holds.
func applyEntry(root string, hdr *tar.Header, r io.Reader) error {
	p, err := securejoin.SecureJoin(root, hdr.Name)
	if err != nil {
		return err
	}
	mode := os.FileMode(hdr.Mode & 0o7777)
	if hdr.PAXRecords[metaRecord] != "" {
		return setMeta(p, hdr, mode)
	}
	if p != root {
		// Replace what is there unless it is a directory staying one.
		if fi, err := os.Lstat(p); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), volumeMode); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
		return os.Lchown(p, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		target, err := securejoin.SecureJoin(root, hdr.Linkname)
		if err != nil {
			return err
		}
		return os.Link(target, p)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		if hdr.Typeflag == tar.TypeChar {
			kind = unix.S_IFCHR
		} else if hdr.Typeflag == tar.TypeBlock {
			kind = unix.S_IFBLK
		}
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		if err := unix.Mknod(p, kind|uint32(mode), dev); err != nil {
			return err
		}
	default:
		return nil
	}
	return setMeta(p, hdr, mode)
}

// setMeta gives an entry its owner, mode and modification time.
func setMeta(p string, hdr *tar.Header, mode os.FileMode) error {
	if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	// chown clears setuid bits: the mode goes after it.
	if err := os.Chmod(p, mode); err != nil {
		return err
	}
	t := unix.NsecToTimeval(hdr.ModTime.UnixNano())
	return unix.Lutimes(p, []unix.Timeval{t, t})
}

// applyDeletes removes the listed paths (children before parents).
func applyDeletes(root, list string) error {
	if list == "" {
		return nil
	}
	paths := strings.Split(list, "\n")
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for _, rel := range paths {
		p, err := securejoin.SecureJoin(root, rel)
		if err != nil || p == root {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// Sync implements TreeSyncer.
func (d *dirDriver) Sync(ctx context.Context) error { return syncfs(d.root) }
