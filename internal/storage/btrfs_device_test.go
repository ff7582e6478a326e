package storage

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// scratchDevice formats a btrfs image and binds it to a loop device (no
// autoclear: nothing holds it open), standing in for a disk an
// administrator gave vessel. The device is detached when the test ends.
func scratchDevice(t *testing.T) string {
	t.Helper()
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := createSparse(image, testPoolSize); err != nil {
		t.Fatal(err)
	}
	if err := newBtrfsTool().mkfs(t.Context(), image, mkfsOpts{Label: "vessel"}); err != nil {
		t.Fatal(err)
	}
	dev, err := attachLoop(image, loopAttachOpts{})
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	t.Cleanup(func() {
		if err := detachLoop(dev.Path); err != nil {
			t.Errorf("detach %s: %v", dev.Path, err)
		}
		if gone, err := waitLoopUnbound(context.Background(), dev.Path, loopReleaseTimeout); err != nil || !gone {
			t.Errorf("%s still bound to %s after cleanup (err %v)", dev.Path, image, err)
		}
	})
	return dev.Path
}

// newDevicePool returns a driver for a pool on a fresh btrfs block device.
func newDevicePool(t *testing.T) Driver {
	t.Helper()
	dev := scratchDevice(t)
	root := filepath.Join(t.TempDir(), "pool")
	d, err := New(Config{Driver: "btrfs", Root: root, Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(context.Background()); err != nil {
			t.Errorf("cleanup: Unmount: %v", err)
		}
		if m, _ := mountedAt(root); m {
			t.Errorf("%s still mounted after Unmount", root)
		}
	})
	return d
}

func TestBtrfsDeviceConformance(t *testing.T) {
	testutil.NeedRoot(t)
	runConformance(t, newDevicePool)
}

func TestBtrfsDeviceMountLifecycle(t *testing.T) {
	testutil.NeedRoot(t)
	d := newDevicePool(t)
	b := d.(*btrfsDriver)
	if err := d.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ours, err := b.rootMount(); err != nil || !ours {
		t.Fatalf("root mount ours=%v err=%v, want the device's", ours, err)
	}
	checkPoolFlags(t, b)
	// A second Mount finds the device mounted and keeps it.
	if err := d.Mount(t.Context()); err != nil {
		t.Fatalf("second Mount: %v", err)
	}
	if err := d.CreateVolume(t.Context(), ct1); err != nil {
		t.Fatal(err)
	}
	if err := d.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountedAt(b.root); m {
		t.Fatal("root still mounted after Unmount")
	}
	if err := d.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !d.VolumeExists(ct1) {
		t.Error("volume gone after remounting the device")
	}
}

// A btrfs at Root that is not the pool's device is not taken for it.
func TestBtrfsDeviceForeignMount(t *testing.T) {
	testutil.NeedRoot(t)
	foreign := scratchBtrfs(t)
	d, err := New(Config{Driver: "btrfs", Root: foreign, Device: scratchDevice(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Mount(t.Context()); err == nil {
		t.Fatal("Mount over a foreign btrfs succeeded")
	}
}

func TestBtrfsDeviceConfig(t *testing.T) {
	if _, err := New(Config{Driver: "btrfs", Root: "/p", Device: "/dev/x", Source: "/s"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Device and Source: %v, want ErrInvalidConfig", err)
	}
	if _, err := New(Config{Driver: "btrfs", Root: "/p", Device: "dev/x"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("relative Device: %v, want ErrInvalidConfig", err)
	}
	d, err := New(Config{Driver: "btrfs", Root: "/p", Device: "/dev/x"})
	if err != nil {
		t.Fatal(err)
	}
	if b := d.(*btrfsDriver); b.loopFile != "" || b.device != "/dev/x" {
		t.Errorf("driver %+v: want the device and no loop file", b)
	}
}
