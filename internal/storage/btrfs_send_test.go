package storage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestBtrfsSendReceive moves a volume between two pools: a full stream,
// then an incremental one against the first, as a migration's pre-copy does.
func TestBtrfsSendReceive(t *testing.T) {
	ctx := context.Background()
	src, dst := newLoopPool(t), newLoopPool(t)
	for _, d := range []Driver{src, dst} {
		if err := d.Mount(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, ok := src.(Sender)
	if !ok {
		t.Fatal("btrfs driver is not a Sender")
	}
	r, ok := dst.(Receiver)
	if !ok {
		t.Fatal("btrfs driver is not a Receiver")
	}
	ctr := Volume{Type: VolumeContainer, Name: "c1"}
	root := mustCreate(t, src, ctr)
	writeFile(t, filepath.Join(root, "a"), []byte("first"))
	writeFile(t, filepath.Join(root, "gone"), []byte("soon deleted"))

	send := func(snap string, parent *Volume) *bytes.Buffer {
		t.Helper()
		vol := Volume{Type: VolumeSnapshot, Name: "c1/" + snap}
		if err := src.CloneVolume(ctx, vol, ctr, true); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := s.SendVolume(ctx, vol, parent, &buf); err != nil {
			t.Fatal(err)
		}
		return &buf
	}
	full := send(".m0", nil)
	// The receiver may use another container name.
	if err := r.ReceiveVolume(ctx, Volume{Type: VolumeSnapshot, Name: "moved/.m0"}, full); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "a"), []byte("second"))
	if err := os.Remove(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	fullSize := int64(full.Cap())
	delta := send(".m1", &Volume{Type: VolumeSnapshot, Name: "c1/.m0"})
	if int64(delta.Len()) >= fullSize && fullSize > 0 {
		t.Logf("incremental stream (%d B) not smaller than the full one (%d B)", delta.Len(), fullSize)
	}
	got := Volume{Type: VolumeSnapshot, Name: "moved/.m1"}
	if err := r.ReceiveVolume(ctx, got, delta); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst.Path(got), "a"))
	if err != nil || string(b) != "second" {
		t.Fatalf("received a = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst.Path(got), "gone")); !os.IsNotExist(err) {
		t.Fatalf("deleted file survived the incremental stream: %v", err)
	}
	// A writable container volume cloned from the received snapshot.
	moved := Volume{Type: VolumeContainer, Name: "moved"}
	if err := dst.CloneVolume(ctx, moved, got, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst.Path(moved), "new"), []byte("writable"))

	// A garbage stream fails cleanly and leaves no volume.
	bad := Volume{Type: VolumeSnapshot, Name: "moved/.m9"}
	if err := r.ReceiveVolume(ctx, bad, bytes.NewReader([]byte("not a send stream"))); err == nil {
		t.Fatal("garbage stream received")
	}
	if dst.VolumeExists(bad) {
		t.Fatal("failed receive left a volume")
	}
	for _, v := range []Volume{moved, got, {Type: VolumeSnapshot, Name: "moved/.m0"}} {
		if err := dst.DeleteVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
}
