package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirSync moves a live tree in rsync-style passes: a full one, then
// only what changed, including deletions, metadata, links and devices.
func TestDirSync(t *testing.T) {
	ctx := context.Background()
	src, dst := newDirPool(t), newDirPool(t)
	for _, d := range []Driver{src, dst} {
		if err := d.Mount(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, ok := src.(TreeSyncer)
	if !ok {
		t.Fatal("dir driver is not a TreeSyncer")
	}
	r := dst.(TreeSyncer)
	vol := Volume{Type: VolumeContainer, Name: "c1"}
	root := mustCreate(t, src, vol)
	writeFile(t, filepath.Join(root, "etc/conf"), []byte("v1"))
	writeFile(t, filepath.Join(root, "gone/file"), []byte("bye"))
	writeFile(t, filepath.Join(root, "big"), bytes.Repeat([]byte("x"), 1<<20))
	if err := os.Symlink("etc/conf", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "etc/conf"), filepath.Join(root, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "etc/conf"), 1000, 1000); err != nil {
		t.Fatal(err)
	}

	pass := func(prev Manifest) (Manifest, int) {
		t.Helper()
		var buf bytes.Buffer
		m, err := s.SyncVolume(ctx, vol, prev, &buf)
		if err != nil {
			t.Fatal(err)
		}
		n := buf.Len()
		if err := r.ApplySync(ctx, Volume{Type: VolumeContainer, Name: "moved"}, &buf); err != nil {
			t.Fatal(err)
		}
		return m, n
	}
	same := func(what string) {
		t.Helper()
		want, got := treeListing(t, root), treeListing(t, dst.Path(Volume{Type: VolumeContainer, Name: "moved"}))
		if !maps.Equal(want, got) {
			t.Fatalf("%s: trees differ\nsource: %v\ntarget: %v", what, want, got)
		}
	}
	m, full := pass(nil)
	same("full pass")

	writeFile(t, filepath.Join(root, "etc/conf"), []byte("version two"))
	if err := os.RemoveAll(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "new/file"), []byte("hello"))
	if err := os.Chmod(filepath.Join(root, "big"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, delta := pass(m)
	same("incremental pass")
	if delta >= full/2 {
		t.Errorf("incremental pass sent %d bytes, full %d: changed files only expected", delta, full)
	}
}

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
		if err := writeContent(&buf, p, &st); !errors.Is(err, errChanged) {
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
