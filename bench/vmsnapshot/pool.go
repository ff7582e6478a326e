package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/testhost"
)

// rootTestsLock serialises work on loop devices and btrfs with the other
// root tests on this machine; held only while the pool is made or removed.
const rootTestsLock = "/tmp/vessel-root-tests.lock"

// pool is a place state files are written to.
type pool struct {
	Name string
	// FS is the filesystem type; Dir the state directory (NODATASUM on
	// btrfs).
	FS        string
	Dir       string
	NoDataSum bool
}

// withLock runs fn holding the shared root-tests lock (the fd is
// close-on-exec, so the commands fn runs do not inherit it).
func withLock(fn func() error) error {
	f, err := os.OpenFile(rootTestsLock, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closed next
	return fn()
}

func sh(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// btrfsPool makes a btrfs pool the way vessel's is made: a sparse file on
// the root filesystem behind a loop device with direct I/O and 4 KiB
// sectors, mounted; it is removed at the runner's end.
func btrfsPool(r *testhost.Runner, work, size string) pool {
	img := filepath.Join(work, "pool.img")
	mnt := filepath.Join(work, "pool")
	var dev string
	err := withLock(func() error {
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return err
		}
		if _, err := sh("truncate", "-s", size, img); err != nil {
			return err
		}
		d, err := sh("losetup", "--direct-io=on", "--sector-size", "4096", "--show", "-f", img)
		if err != nil {
			return err
		}
		dev = d
		r.Cleanup(func() {
			_ = withLock(func() error {
				_, uerr := sh("umount", mnt)
				_, lerr := sh("losetup", "-d", dev)
				if uerr != nil || lerr != nil {
					r.Errorf("pool teardown: %v %v", uerr, lerr)
				}
				return nil
			})
			os.Remove(img)
		})
		if _, err := sh("mkfs.btrfs", "-q", "-f", dev); err != nil {
			return err
		}
		_, err = sh("mount", dev, mnt)
		return err
	})
	if err != nil {
		r.Fatalf("btrfs pool: %v", err)
	}
	dir := filepath.Join(mnt, "state")
	nocow, err := storage.PrepareNoDataSumDir(dir)
	if err != nil {
		r.Fatalf("state dir: %v", err)
	}
	return pool{Name: "btrfs-loop", FS: "btrfs", Dir: dir, NoDataSum: nocow}
}

// rootPool is a directory on the root filesystem.
func rootPool(r *testhost.Runner, work string) pool {
	dir := filepath.Join(work, "rootfs-state")
	if _, err := storage.PrepareNoDataSumDir(dir); err != nil {
		r.Fatalf("state dir: %v", err)
	}
	fs, _ := sh("findmnt", "-n", "-o", "FSTYPE", "-T", dir)
	return pool{Name: "rootfs", FS: fs, Dir: dir}
}
