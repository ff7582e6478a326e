package network

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// MountSysfs mounts, read-only on dir (created if missing), a sysfs seen
// from inside the network namespace at netnsPath: its /sys/class/net lists
// that namespace's links. An unprivileged container gets /sys this way; it
// may not mount sysfs itself, because its network namespace belongs to the
// host's user namespace. A sysfs already on dir is replaced.
func MountSysfs(netnsPath, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sysfs mount point: %w", err)
	}
	if err := UnmountSysfs(dir, false); err != nil {
		return err
	}
	target, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer target.Close()
	return onThreadIn(func() error { return netns.Set(target) }, func() error {
		err := unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if err != nil {
			return fmt.Errorf("mount sysfs on %s: %w", dir, err)
		}
		return nil
	})
}

// UnmountSysfs detaches the sysfs on dir, and with remove deletes dir.
// Nothing mounted, or no dir, is not an error.
func UnmountSysfs(dir string, remove bool) error {
	for {
		err := unix.Unmount(dir, unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		break
	}
	if remove {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
