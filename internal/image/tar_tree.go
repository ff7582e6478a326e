package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// maxTarMembers bounds how many members a scanned archive may have, which
// bounds the memory its tarTree takes.
const maxTarMembers = 1 << 21

// maxSymlinkHops is how many symbolic links tarTree.resolve follows, like
// the kernel's limit.
const maxSymlinkHops = 40

// tarNode is what a tarTree keeps of one member.
type tarNode struct {
	typ  byte   // tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, ...
	link string // symlink target as written; hard link target as a clean member name
}

// tarTree is what scanning a rootfs tar archive learns: the type of every
// member, and the content of small files named os-release. Member names
// are clean paths relative to the root, "" being the root itself.
type tarTree struct {
	nodes      map[string]tarNode
	osReleases map[string][]byte
}

// scanTar reads a tar stream to its end-of-archive marker and returns its
// tree. Bad archives fail with ErrInvalidImage: unreadable headers, no
// members, or a member (or hard link target) with a ".." path element.
// Later members replace earlier ones with the same name, as on extraction.
func scanTar(r io.Reader) (*tarTree, error) {
	t := &tarTree{nodes: map[string]tarNode{}, osReleases: map[string][]byte{}}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrInvalidImage) { // from a decompressor
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w: not a tar archive: %w", ErrInvalidImage, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if len(t.nodes) >= maxTarMembers {
			return nil, fmt.Errorf("%w: more than %d members", ErrInvalidImage, maxTarMembers)
		}
		if err := t.add(hdr, tr); err != nil {
			return nil, err
		}
	}
	if len(t.nodes) == 0 {
		return nil, fmt.Errorf("%w: empty archive", ErrInvalidImage)
	}
	return t, nil
}

// add records one member, reading its content if it may be an os-release.
func (t *tarTree) add(hdr *tar.Header, content io.Reader) error {
	name, err := cleanMemberName(hdr.Name)
	if err != nil {
		return err
	}
	// archive/tar reports old-style regular files (TypeRegA) as TypeReg.
	n := tarNode{typ: hdr.Typeflag, link: hdr.Linkname}
	if n.typ == tar.TypeLink {
		if n.link, err = cleanMemberName(hdr.Linkname); err != nil {
			return err
		}
	}
	t.nodes[name] = n
	delete(t.osReleases, name)
	if n.typ == tar.TypeReg && path.Base(name) == "os-release" && hdr.Size <= maxOSReleaseSize {
		data, err := io.ReadAll(content)
		if err != nil {
			return fmt.Errorf("%w: reading %s: %w", ErrInvalidImage, hdr.Name, err)
		}
		t.osReleases[name] = data
	}
	return nil
}

// cleanMemberName turns a member name ("./etc/", "/etc", "etc") into a clean
// path relative to the root ("etc"; "" for the root). A ".." element
// anywhere is path traversal and fails with ErrInvalidImage.
func cleanMemberName(name string) (string, error) {
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", fmt.Errorf("%w: member %q escapes the root", ErrInvalidImage, name)
		}
	}
	return strings.TrimPrefix(path.Clean("/"+name), "/"), nil
}

// resolve follows symbolic links in p the way the kernel would inside a
// chroot to the archive: absolute targets start again at the root and ".."
// stops at the root. Directories without members of their own count as
// plain directories. It returns the member reached (after one hard link, if
// it is one), every link target followed on the way, and whether the
// member exists.
func (t *tarTree) resolve(p string) (name string, hops []string, ok bool) {
	todo := strings.Split(p, "/")
	cur := ""
	for len(todo) > 0 {
		elem := todo[0]
		todo = todo[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			cur = parentDir(cur)
			continue
		}
		next := path.Join(cur, elem)
		n, found := t.nodes[next]
		if !found || n.typ != tar.TypeSymlink {
			cur = next
			continue
		}
		if len(hops) == maxSymlinkHops {
			return "", hops, false
		}
		hops = append(hops, n.link)
		if strings.HasPrefix(n.link, "/") {
			cur = ""
		}
		todo = append(strings.Split(n.link, "/"), todo...)
	}
	n, found := t.nodes[cur]
	if found && n.typ == tar.TypeLink {
		hops = append(hops, n.link)
		cur = n.link
		_, found = t.nodes[cur]
	}
	return cur, hops, found
}

// parentDir returns the directory containing the member named p, "" (the
// root) for top-level members and for the root itself.
func parentDir(p string) string {
	d := path.Dir(p)
	if d == "." || d == "/" {
		return ""
	}
	return d
}

// exists reports whether p names a member, following symbolic links.
func (t *tarTree) exists(p string) bool {
	_, _, ok := t.resolve(p)
	return ok
}

// detectInit says which init /sbin/init is: a link to busybox, to systemd,
// a sysvinit binary (a regular file with sysvinit-core's documentation or an
// /etc/inittab next to it), or something else; initNone if there is no
// /sbin/init leading to a regular file.
func (t *tarTree) detectInit() initKind {
	name, hops, ok := t.resolve("sbin/init")
	if !ok || t.nodes[name].typ != tar.TypeReg {
		return initNone
	}
	for _, p := range append(hops, name) {
		if path.Base(p) == "busybox" {
			return initBusybox
		}
	}
	if path.Base(name) == "systemd" {
		return initSystemd
	}
	if t.exists("usr/share/doc/sysvinit-core") || t.exists("etc/inittab") {
		return initSysv
	}
	return initOther
}

// osRelease returns the parsed /etc/os-release, else /usr/lib/os-release,
// or a zero OSRelease when the archive has neither.
func (t *tarTree) osRelease() OSRelease {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		name, _, ok := t.resolve(p)
		data, captured := t.osReleases[name]
		if !ok || !captured {
			continue
		}
		if rel, err := ParseOSRelease(bytes.NewReader(data)); err == nil {
			return rel
		}
	}
	return OSRelease{}
}

// isOCILayout reports whether the archive is an OCI image layout rather
// than a root filesystem: it has the files oci-layout and index.json at its
// top.
func (t *tarTree) isOCILayout() bool {
	return t.nodes["oci-layout"].typ == tar.TypeReg && t.nodes["index.json"].typ == tar.TypeReg
}
