package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Block devices are named "MAJ:MIN", as in /sys/dev/block/ and the cgroup
// io controller's files. Resolving a pool to the devices its I/O lands on:
//
//   - a filesystem's devices are its st_dev, except for btrfs, whose st_dev
//     is an anonymous per-subvolume number: its member devices are listed in
//     /sys/fs/btrfs/FSID/devices/;
//   - a loop device is reported itself, then resolved through the
//     filesystem holding its backing file;
//   - a partition resolves to its whole disk (io.max accepts whole disks
//     only);
//   - anything else (a whole disk, a device-mapper or md device, which are
//     whole disks to the io controller too) is reported as is.

const (
	sysDevBlock = "/sys/dev/block"
	sysFsBtrfs  = "/sys/fs/btrfs"
	// maxLoopNesting bounds loop-in-loop resolution (and so cycles).
	maxLoopNesting = 8
)

// blockDevicesOf returns the devices backing the filesystem holding path,
// resolved as above, loop devices before what is underneath, without
// duplicates. Filesystems on no block device (tmpfs, network) give none.
func blockDevicesOf(path string) ([]string, error) {
	var out []string
	if err := resolveFilesystem(path, 0, &out); err != nil {
		return nil, err
	}
	return dedupe(out), nil
}

// resolveFilesystem appends the resolved devices of the filesystem holding
// path to out.
func resolveFilesystem(path string, depth int, out *[]string) error {
	devs, err := filesystemDevices(path)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if err := resolveDevice(d, depth, out); err != nil {
			return err
		}
	}
	return nil
}

// filesystemDevices returns the unresolved devices of the filesystem holding
// path: btrfs member devices, or st_dev.
func filesystemDevices(path string) ([]string, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return nil, fmt.Errorf("block devices of %s: statfs: %w", path, err)
	}
	if sfs.Type == unix.BTRFS_SUPER_MAGIC {
		return btrfsMembers(path)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("block devices of %s: %w", path, err)
	}
	return []string{fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))}, nil
}

// btrfsMembers returns the member devices of the btrfs filesystem holding
// path.
func btrfsMembers(path string) ([]string, error) {
	fsid, err := btrfsFsid(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(sysFsBtrfs, fsid, "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("btrfs member devices of %s: %w", path, err)
	}
	var devs []string
	for _, e := range entries {
		dev, err := readDevFile(filepath.Join(dir, e.Name(), "dev"))
		if err != nil {
			return nil, fmt.Errorf("btrfs member devices of %s: %w", path, err)
		}
		devs = append(devs, dev)
	}
	return devs, nil
}

// resolveDevice appends the whole-disk devices behind dev to out.
func resolveDevice(dev string, depth int, out *[]string) error {
	sys := filepath.Join(sysDevBlock, dev)
	if _, err := os.Stat(sys); errors.Is(err, fs.ErrNotExist) {
		return nil // an anonymous device: no block device behind it
	}
	name, err := blockName(sys)
	if err != nil {
		return fmt.Errorf("resolve block device %s: %w", dev, err)
	}
	backing, isLoop, err := loopBackingFile(name)
	if err != nil {
		return fmt.Errorf("resolve block device %s: %w", dev, err)
	}
	if isLoop {
		*out = append(*out, dev)
		if depth >= maxLoopNesting {
			return nil
		}
		err := resolveFilesystem(backing, depth+1, out)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // backing file deleted since: nothing more to find
		}
		return err
	}
	whole, err := wholeDisk(sys)
	if err != nil {
		return fmt.Errorf("resolve block device %s: %w", dev, err)
	}
	*out = append(*out, whole)
	return nil
}

// wholeDisk returns the MAJ:MIN of the disk a /sys/dev/block/MAJ:MIN entry
// belongs to: its parent for a partition, itself otherwise. In sysfs a
// partition's directory sits inside its disk's directory.
func wholeDisk(sys string) (string, error) {
	_, err := os.Stat(filepath.Join(sys, "partition"))
	if errors.Is(err, fs.ErrNotExist) {
		return readDevFile(filepath.Join(sys, "dev"))
	}
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", err
	}
	return readDevFile(filepath.Join(filepath.Dir(real), "dev"))
}

// blockName returns the kernel's name ("loop3", "vda1") of the device whose
// /sys/dev/block/MAJ:MIN entry is sys (a symlink to .../NAME).
func blockName(sys string) (string, error) {
	target, err := os.Readlink(sys)
	if err != nil {
		return "", err
	}
	return filepath.Base(target), nil
}

// readDevFile reads a sysfs "dev" file ("MAJ:MIN\n").
func readDevFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// dedupe returns devs without repeats, keeping first occurrences in order.
func dedupe(devs []string) []string {
	seen := make(map[string]bool, len(devs))
	out := devs[:0]
	for _, d := range devs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}
