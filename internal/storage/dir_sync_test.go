package storage

import (
	"bytes"
	"context"
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
