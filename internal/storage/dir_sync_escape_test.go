package storage

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// canary is what the host files of these tests hold: it must never show
// up in a pass nor be changed by one.
const canary = "host secret, never sent"

// hostDir makes a directory outside the tree holding file "f" with the
// canary.
func hostDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), []byte(canary))
	return dir
}

// checkHostDir fails the test if the host directory is not exactly as
// hostDir made it.
func checkHostDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	if len(entries) != 1 || entries[0].Name() != "f" {
		t.Errorf("host directory changed: %v", entries)
	}
	b, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil || string(b) != canary {
		t.Errorf("host file changed: %q, %v", b, err)
	}
}

// TestWalkTreeSwappedDir: a directory swapped for a symlink to a host
// directory after the walk stat it (a running container racing a
// pre-copy) is not entered: the walk never lists a host file.
func TestWalkTreeSwappedDir(t *testing.T) {
	root, host := t.TempDir(), hostDir(t)
	must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	writeFile(t, filepath.Join(root, "d", "f"), []byte("container"))
	var seen []string
	err := walkTree(t.Context(), root, func(e *treeEntry) (bool, error) {
		seen = append(seen, e.rel)
		if e.rel == "d" {
			must(t, os.Rename(filepath.Join(root, "d"), filepath.Join(root, "moved")))
			must(t, os.Symlink(host, filepath.Join(root, "d")))
		}
		return true, nil
	})
	must(t, err)
	for _, rel := range seen {
		if strings.HasPrefix(rel, "d/") {
			t.Errorf("the walk entered the swapped directory: %q", seen)
		}
	}
}

// TestDirPassSwappedLinkGroupDir: a link group's file is read after the
// walk, found again from the root; its directory swapped meanwhile for a
// symlink to a host directory holding a file of the same name gives
// zeros (errChanged), not the host file.
func TestDirPassSwappedLinkGroupDir(t *testing.T) {
	root, host := t.TempDir(), hostDir(t)
	must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	writeFile(t, filepath.Join(root, "d", "f"), []byte(strings.Repeat("c", len(canary))))
	must(t, os.Link(filepath.Join(root, "d", "f"), filepath.Join(root, "g")))
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(root, "d", "f"), &st))
	s := stamp{Mode: st.Mode, Size: st.Size, Ino: st.Ino}
	gs := linkGroups{}
	gs.add("d/f", &st, s, true)
	gs.add("g", &st, s, true)
	// The walk is over: swap the directory.
	must(t, os.Rename(filepath.Join(root, "d"), filepath.Join(root, "moved")))
	must(t, os.Symlink(host, filepath.Join(root, "d")))
	rootfd, err := openTreeRoot(root)
	must(t, err)
	defer unix.Close(rootfd)
	var b bytes.Buffer
	cur := manifest{}
	must(t, gs.write(tar.NewWriter(&b), rootfd, cur))
	if bytes.Contains(b.Bytes(), []byte(canary)) {
		t.Fatal("the pass carries the host file's content")
	}
	if cur["d/f"] != (stamp{}) {
		t.Errorf("the changed group kept its stamp %+v: the next pass would not send it again", cur["d/f"])
	}
}

// hostilePass builds a tar-sync pass from entries (written as given) and
// deleted paths.
func hostilePass(t *testing.T, deleted []string, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	must(t, writeRecord(tw, formatRecord, transferFormatDir))
	for _, h := range hdrs {
		h.Format, h.ModTime = tar.FormatPAX, time.Unix(1e9, 0)
		must(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			must(t, err)
		}
	}
	if len(deleted) > 0 {
		must(t, writeRecord(tw, deletedRecord, strings.Join(deleted, "\x00")))
	}
	must(t, writeRecord(tw, endRecord, "1"))
	must(t, tw.Close())
	return &b
}

// TestApplyPassStaysInRoot: a hostile pass (from a peer) cannot write,
// change or delete anything outside the volume through symlinks it makes
// or finds, nor through ".." names.
func TestApplyPassStaysInRoot(t *testing.T) {
	host := hostDir(t)
	hostFile := filepath.Join(host, "f")
	uid, gid := os.Getuid(), os.Getgid()
	var before unix.Stat_t
	must(t, unix.Stat(hostFile, &before))
	link := func(name, target string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, Uid: uid, Gid: gid}
	}
	file := func(name string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: 4, Mode: 0o4755, Uid: uid, Gid: gid}
	}
	cases := map[string]struct {
		deleted []string
		hdrs    []*tar.Header
		wantErr bool
	}{
		"file through a symlinked directory":     {hdrs: []*tar.Header{link("./a", host), file("./a/f")}, wantErr: true},
		"new file through a symlinked directory": {hdrs: []*tar.Header{link("./a", host), file("./a/new")}, wantErr: true},
		"directory through a symlinked directory": {
			hdrs: []*tar.Header{link("./a", host), {Typeflag: tar.TypeDir, Name: "./a/sub", Mode: 0o755, Uid: uid, Gid: gid}}, wantErr: true,
		},
		"metadata through a symlink": {
			hdrs: []*tar.Header{link("./a", hostFile), {Typeflag: tar.TypeReg, Name: "./a", Mode: 0o777, PAXRecords: map[string]string{metaRecord: "1"}}}, wantErr: true,
		},
		"file over a symlink":       {hdrs: []*tar.Header{link("./a", hostFile), file("./a")}},
		"dot-dot names":             {hdrs: []*tar.Header{file("../../f"), file("./../f")}},
		"hard link to a host file":  {hdrs: []*tar.Header{{Typeflag: tar.TypeLink, Name: "./l", Linkname: "../../../../../../" + hostFile}}, wantErr: true},
		"hard link through symlink": {hdrs: []*tar.Header{link("./a", host), {Typeflag: tar.TypeLink, Name: "./l", Linkname: "./a/f"}}, wantErr: true},
		"delete through a symlink":  {hdrs: []*tar.Header{link("./a", host)}, deleted: []string{"a/f", "../f"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			err := applyPass(t.Context(), root, hostilePass(t, c.deleted, c.hdrs...))
			if c.wantErr && err == nil {
				t.Error("the pass applied")
			}
			if !c.wantErr && err != nil {
				t.Errorf("pass: %v", err)
			}
			checkHostDir(t, host)
			var st unix.Stat_t
			must(t, unix.Stat(hostFile, &st))
			if st.Mode != before.Mode || st.Nlink != before.Nlink || st.Mtim != before.Mtim {
				t.Errorf("host file changed: mode %o, %d links", st.Mode, st.Nlink)
			}
		})
	}
}

// TestRemoveAtKeepsLinkedDirs: removing a tree removes the symlinks in
// it, never what they point to.
func TestRemoveAtKeepsLinkedDirs(t *testing.T) {
	root, host := t.TempDir(), hostDir(t)
	must(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	must(t, os.Symlink(host, filepath.Join(root, "a", "b", "l")))
	fd, err := openTreeRoot(root)
	must(t, err)
	defer unix.Close(fd)
	must(t, removeAt(fd, "a"))
	if _, err := os.Lstat(filepath.Join(root, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a still there: %v", err)
	}
	checkHostDir(t, host)
}
