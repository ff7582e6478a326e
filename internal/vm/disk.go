package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DiskFile is the VM disk's file name in its volume (a vm-image volume,
// or a VM instance's container volume).
const DiskFile = "disk.img"

// MinDiskSize is the smallest root disk vessel makes; the file is sparse,
// so the free space costs nothing until the guest writes it.
const MinDiskSize = 2 << 30

// DiskSize is the size of a disk for a tree of used bytes: twice the tree
// plus 1 GiB, at least MinDiskSize, in whole MiB.
func DiskSize(used int64) int64 {
	s := max(2*used+1<<30, MinDiskSize)
	return (s + 1<<20 - 1) &^ (1<<20 - 1)
}

// TreeSize adds up the bytes of the regular files under root (hard links
// once), plus a block per directory and symlink: what an ext4 built from
// it must hold at least.
func TreeSize(root string) (int64, error) {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || !info.Mode().IsRegular() {
			total += 4096
			return nil
		}
		k := key{st.Dev, st.Ino}
		if !seen[k] {
			seen[k] = true
			total += (info.Size() + 4095) &^ 4095
		}
		return nil
	})
	return total, err
}

// BuildDisk makes dir/disk.img: a sparse raw file of size bytes (0: sized
// from the tree, DiskSize) holding an ext4 filesystem with rootfs's tree
// (mkfs.ext4 -d copies owners, modes, links, devices and xattrs). The
// directory gets the no-copy-on-write flag first where the filesystem has
// one (btrfs: files made in it are NODATACOW and NODATASUM, so QEMU's
// O_DIRECT writes stay direct; snapshots still share the extents);
// elsewhere that is skipped. The file appears only once complete.
func BuildDisk(ctx context.Context, rootfs, dir string, size int64) error {
	if size == 0 {
		used, err := TreeSize(rootfs)
		if err != nil {
			return fmt.Errorf("vm disk: size of %s: %w", rootfs, err)
		}
		size = DiskSize(used)
	}
	if err := setNoCOW(dir); err != nil {
		return fmt.Errorf("vm disk: %w", err)
	}
	tmp := filepath.Join(dir, DiskFile+".tmp")
	out := filepath.Join(dir, DiskFile)
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("vm disk: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vm disk: %w", err)
	}
	var stderr bytes.Buffer
	// -E root_owner is not given: -d copies the root directory's owner.
	// lazy_itable_init=0 and nodiscard: the file is sparse already.
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "vessel-root", "-d", rootfs,
		"-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", tmp, strconv.FormatInt(size>>10, 10)+"k")
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vm disk: mkfs.ext4 -d %s: %w: %s", rootfs, err, strings.TrimSpace(stderr.String()))
	}
	if err := syncFile(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vm disk: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vm disk: %w", err)
	}
	return nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// setNoCOW sets FS_NOCOW_FL on dir (chattr +C), where the filesystem
// knows it.
func setNoCOW(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		if unsupported(err) {
			return nil
		}
		return fmt.Errorf("flags of %s: %w", dir, err)
	}
	if flags&fsNoCOW != 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsNoCOW)); err != nil && !unsupported(err) {
		return fmt.Errorf("chattr +C %s: %w", dir, err)
	}
	return nil
}

// fsNoCOW is FS_NOCOW_FL (linux/fs.h).
const fsNoCOW = 0x00800000

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
}

// CreateEmptyDisk makes dir/disk.img, a sparse raw file of size bytes
// with nothing in it (a live move's target: the source's mirror fills
// it), NOCOW as BuildDisk's.
func CreateEmptyDisk(dir string, size int64) error {
	if size <= 0 {
		return fmt.Errorf("vm disk: size %d", size)
	}
	if err := setNoCOW(dir); err != nil {
		return fmt.Errorf("vm disk: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, DiskFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("vm disk: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vm disk: %w", err)
	}
	return nil
}
