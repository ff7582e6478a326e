package image

import (
	"archive/tar"
	"io"
	"path"
	"sort"
	"time"
)

// rootfsMtime is the modification time of every member of an assembled
// archive, 2000-01-01T00:00:00Z, so equal inputs give equal archives.
const rootfsMtime = 946684800

// rootfsTar assembles a root filesystem archive in memory. The archive is
// deterministic: members sorted by name, owned by root (0:0), all with the
// same modification time. Adding a member whose name is taken, or whose
// parent is not a directory, changes nothing and returns false; missing
// parent directories are added with mode 0755.
type rootfsTar struct {
	members map[string]rootfsMember
}

// rootfsMember is one member of a rootfsTar.
type rootfsMember struct {
	typ  byte
	mode int64
	link string
	data []byte
}

// newRootfsTar returns an archive holding only the root directory.
func newRootfsTar() *rootfsTar {
	return &rootfsTar{members: map[string]rootfsMember{
		"": {typ: tar.TypeDir, mode: 0o755},
	}}
}

// dir adds a directory; mode may include the sticky bit (0o1777).
func (r *rootfsTar) dir(name string, mode int64) bool {
	return r.add(name, rootfsMember{typ: tar.TypeDir, mode: mode})
}

// file adds a regular file.
func (r *rootfsTar) file(name string, mode int64, data []byte) bool {
	return r.add(name, rootfsMember{typ: tar.TypeReg, mode: mode, data: data})
}

// symlink adds a symbolic link to target.
func (r *rootfsTar) symlink(name, target string) bool {
	return r.add(name, rootfsMember{typ: tar.TypeSymlink, mode: 0o777, link: target})
}

func (r *rootfsTar) add(name string, m rootfsMember) bool {
	name, err := cleanMemberName(name)
	if err != nil || name == "" {
		return false
	}
	if _, taken := r.members[name]; taken || !r.ensureDir(parentDir(name)) {
		return false
	}
	r.members[name] = m
	return true
}

// ensureDir makes sure dir and its parents exist as directories.
func (r *rootfsTar) ensureDir(dir string) bool {
	if m, ok := r.members[dir]; ok {
		return m.typ == tar.TypeDir
	}
	if !r.ensureDir(parentDir(dir)) {
		return false
	}
	r.members[dir] = rootfsMember{typ: tar.TypeDir, mode: 0o755}
	return true
}

// writeTo writes the archive to w.
func (r *rootfsTar) writeTo(w io.Writer) error {
	names := make([]string, 0, len(r.members))
	for name := range r.members {
		names = append(names, name)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, name := range names {
		m := r.members[name]
		hdr := &tar.Header{
			Typeflag: m.typ,
			Name:     name,
			Linkname: m.link,
			Mode:     m.mode,
			Size:     int64(len(m.data)),
			ModTime:  time.Unix(rootfsMtime, 0),
			Uname:    "root",
			Gname:    "root",
		}
		if m.typ == tar.TypeDir {
			hdr.Name = path.Join(".", name) + "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(m.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
