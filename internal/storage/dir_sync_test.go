package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeletedSince: deletions are sorted, and paths inside a deleted
// directory are left out (unless the directory was replaced).
func TestDeletedSince(t *testing.T) {
	st := stamp{Mode: 1}
	prev := manifest{"": st, "a": st, "a/b": st, "a/b/c": st, "a-c": st, "d": st, "d/e": st, "f": st}
	cur := manifest{"": st, "d": st, "f": st} // "d" replaced by a file: "d/e" stays listed
	got := deletedSince(prev, cur)
	if want := []string{"a", "a-c", "d/e"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deletedSince = %q, want %q", got, want)
	}
	if got := deletedSince(nil, cur); len(got) != 0 {
		t.Errorf("first pass deletes %q", got)
	}
}

func TestChunkPaths(t *testing.T) {
	got := chunkPaths([]string{"aaaa", "bb", "c", "dddddddddd", "e"}, 8)
	want := []string{"aaaa\x00bb", "c", "dddddddddd", "e"}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("chunkPaths = %q, want %q", got, want)
	}
	if got := chunkPaths(nil, 8); got != nil {
		t.Errorf("chunkPaths(nil) = %q", got)
	}
}

// TestWriteContentChanged: a file that shrank, vanished or became a fifo
// after its stat is padded to the size announced, without blocking, and
// reported changed.
func TestWriteContentChanged(t *testing.T) {
	dir := t.TempDir()
	dirfd, err := openTreeRoot(dir)
	must(t, err)
	defer unix.Close(dirfd)
	changes := map[string]func(p string) error{
		"shrank":   func(p string) error { return os.Truncate(p, 10) },
		"vanished": os.Remove,
		"fifo": func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return unix.Mkfifo(p, 0o600)
		},
	}
	for name, change := range changes {
		p := filepath.Join(dir, name)
		writeFile(t, p, bytes.Repeat([]byte("y"), 1000))
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		must(t, change(p))
		var buf bytes.Buffer
		if err := writeContent(&buf, dirfd, name, &st); !errors.Is(err, errChanged) {
			t.Errorf("%s: got %v, want errChanged", name, err)
		}
		if buf.Len() != 1000 {
			t.Errorf("%s: wrote %d bytes, want the 1000 announced", name, buf.Len())
		}
	}
}

// TestDirPassLinkGroup: a hard-linked file that changed while a pass
// walked it (so the pass recorded an older stamp under one path than under
// the other) is sent again under all its paths, and stays one inode.
func TestDirPassLinkGroup(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(src, "f"), []byte("v1"))
	must(t, os.Link(filepath.Join(src, "f"), filepath.Join(src, "g")))
	pass := func(prev manifest) manifest {
		t.Helper()
		var b bytes.Buffer
		m, err := writePass(t.Context(), src, prev, &b)
		must(t, err)
		must(t, applyPass(t.Context(), dst, &b))
		return m
	}
	m := pass(nil)
	writeFile(t, filepath.Join(src, "f"), []byte("v2, changed during the walk"))
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(src, "g"), &st))
	// The walk stat f before the change and g after it.
	m["g"] = stamp{Mode: st.Mode, Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Ino: st.Ino}
	m = pass(m)
	checkSameTree(t, "after the change", src, dst)
	if m["f"] != m["g"] {
		t.Errorf("the paths of one inode got different stamps: %+v, %+v", m["f"], m["g"])
	}
}
