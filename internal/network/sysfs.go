package network

import (
	"errors"
	"fmt"
	"os"
	"runtime"

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
	errc := make(chan error, 1)
	go func() { errc <- mountSysfsIn(target, dir) }()
	return <-errc
}

// mountSysfsIn runs on a goroutine of its own, as bindNewNetns does.
func mountSysfsIn(target netns.NsHandle, dir string) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns: %w", err)
	}
	mountErr := unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	if err := netns.Set(orig); err != nil {
		return errors.Join(mountErr, fmt.Errorf("restore netns of thread: %w", err))
	}
	runtime.UnlockOSThread()
	if mountErr != nil {
		return fmt.Errorf("mount sysfs on %s: %w", dir, mountErr)
	}
	return nil
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
