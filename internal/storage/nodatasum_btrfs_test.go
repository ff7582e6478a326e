package storage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// TestPrepareNoDataSumDirBtrfs checks on a real btrfs (a loop device) that the
// state directory gets FS_NOCOW_FL, that files made in it inherit it (so
// QEMU's O_DIRECT writes stay direct on kernels ≥ 6.14), and that a
// non-empty directory without it is refused.
func TestPrepareNoDataSumDirBtrfs(t *testing.T) {
	testutil.NeedRoot(t)
	mnt := btrfsLoop(t)
	dir := filepath.Join(mnt, "vm", "state")
	nocow, err := PrepareNoDataSumDir(dir)
	if err != nil || !nocow {
		t.Fatalf("PrepareNoDataSumDir: nocow %v, %v", nocow, err)
	}
	f := filepath.Join(dir, "vm.state")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !hasNoCOW(t, f) {
		t.Error("a file made in the state dir is not NOCOW")
	}
	if nocow, err := PrepareNoDataSumDir(dir); err != nil || !nocow {
		t.Errorf("again on the NOCOW dir with files: nocow %v, %v", nocow, err)
	}

	full := filepath.Join(mnt, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareNoDataSumDir(full); !errors.Is(err, errNotEmpty) {
		t.Errorf("non-empty checksummed dir: %v, want errNotEmpty", err)
	}
}

func hasNoCOW(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	return flags&fsNoCOWFL != 0
}

// btrfsLoop mounts a fresh 256 MiB btrfs on a loop device and returns the
// mount point; the test's cleanup unmounts it and detaches the device.
func btrfsLoop(t *testing.T) string {
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "pool.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(256 << 20)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--show", "-f", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if err := exec.Command("losetup", "-d", dev).Run(); err != nil {
			t.Errorf("losetup -d %s: %v", dev, err)
		}
	})
	if out, err := exec.Command("mkfs.btrfs", "-q", "-f", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("umount %s: %v", mnt, err)
		}
	})
	return mnt
}

func TestPrepareNoDataSumDirNotBtrfs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	nocow, err := PrepareNoDataSumDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if nocow {
		t.Error("NOCOW reported off btrfs")
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("state dir not made: %v", err)
	}
}
