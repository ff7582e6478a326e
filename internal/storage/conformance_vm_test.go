package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// testVMDiskClone: a VM instance's volume is a clone of its image's
// vm-image volume, which holds one large sparse raw disk file. The clone
// has the same bytes, stays sparse (a dir pool copies holes as holes, a
// btrfs pool shares the extents), and writing to it leaves the image's
// disk alone.
func testVMDiskClone(t *testing.T, d Driver) {
	ctx := t.Context()
	img := Volume{Type: VolumeVMImage, Name: "img1"}
	disk := filepath.Join(mustCreate(t, d, img), "disk.img")
	const size, dataAt = 256 << 20, 8 << 20
	data := bytes.Repeat([]byte("vessel-vm-disk!\n"), 1<<16) // 1 MiB
	f, err := os.Create(disk)
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt(data, dataAt)
	must(t, err)
	must(t, f.Close())
	must(t, d.SetReadOnly(ctx, img, true))

	must(t, d.CloneVolume(ctx, ct1, img, false))
	clone := filepath.Join(d.Path(ct1), "disk.img")
	st, err := os.Stat(clone)
	must(t, err)
	if st.Size() != size {
		t.Fatalf("clone's disk is %d bytes, want %d", st.Size(), size)
	}
	if blocks := st.Sys().(*syscall.Stat_t).Blocks * 512; blocks > 16<<20 {
		t.Errorf("clone's disk allocates %d bytes of %d: not sparse", blocks, size)
	}
	g, err := os.OpenFile(clone, os.O_RDWR, 0)
	must(t, err)
	defer g.Close()
	got := make([]byte, len(data))
	_, err = g.ReadAt(got, dataAt)
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("clone's disk differs from the image's")
	}
	_, err = g.WriteAt([]byte("changed"), dataAt)
	must(t, err)
	orig, err := os.ReadFile(disk)
	must(t, err)
	if !bytes.Equal(orig[dataAt:dataAt+len(data)], data) {
		t.Error("writing the clone changed the image's disk")
	}
}
