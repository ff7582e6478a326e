package cgroups

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// cgroup2RootOptions are the options of the cgroup2 superblock (the whole
// v2 tree, host-wide) as /proc/self/mountinfo shows them. Setting one
// means replaying the others: the kernel takes a reconfigure's list as the
// complete set.
var cgroup2RootOptions = []string{
	"nsdelegate", "favordynmods", "memory_localevents", "memory_recursiveprot",
	"memory_hugetlb_accounting", "pids_localevents",
}

// ErrNoCgroup2 says the host has no cgroup2 mount to configure.
var ErrNoCgroup2 = errors.New("no cgroup2 mount")

// FavorDynMods turns on cgroup2's favordynmods root option, keeping the
// others, and returns the mount point it reconfigured ("" if the option was
// already on).
//
// Without it the kernel keeps cgroup_threadgroup_rwsem in its fast-reader
// mode, and the first task moved between cgroups after a quiet spell waits
// for an RCU grace period: 13-20 ms on a small VM, paid by every container
// start, exec and restore, and inside the frozen window of a live
// migration (runc restore moves a task into the container's cgroups). With
// it, fork and exit take the rwsem's slower shared path instead. The lock
// is global, so the option helps on a cgroup v1 host too, as long as the
// (controller-less) v2 tree is mounted.
//
// Any later cgroup2 mount without the option in the initial cgroup
// namespace clears it again; vessel's CRIU build replays the host's
// options for its own mounts (scripts/criu-patches/0006).
func FavorDynMods() (string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", ErrNoCgroup2
	}
	m := mounts[0]
	opts := rootOptions(m.VFSOptions)
	if slices.Contains(opts, "favordynmods") {
		return "", nil
	}
	if err := setRootOptions(m.Mountpoint, append(opts, "favordynmods")); err != nil {
		return "", err
	}
	return m.Mountpoint, nil
}

// rootOptions picks the cgroup2 root options out of a superblock option
// list ("rw,nsdelegate,memory_recursiveprot").
func rootOptions(superOptions string) []string {
	var out []string
	for o := range strings.SplitSeq(superOptions, ",") {
		if slices.Contains(cgroup2RootOptions, o) {
			out = append(out, o)
		}
	}
	return out
}

// setRootOptions reconfigures the cgroup2 superblock mounted at mountpoint
// with exactly opts as its root options (per-mount flags stay as they are).
func setRootOptions(mountpoint string, opts []string) error {
	fd, err := unix.Fspick(unix.AT_FDCWD, mountpoint, unix.FSPICK_CLOEXEC)
	if err != nil {
		return fmt.Errorf("reconfigure %s: %w", mountpoint, err)
	}
	defer unix.Close(fd)
	for _, o := range opts {
		if err := unix.FsconfigSetFlag(fd, o); err != nil {
			return fmt.Errorf("reconfigure %s: option %s: %w", mountpoint, o, err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return fmt.Errorf("reconfigure %s with %s: %w", mountpoint, strings.Join(opts, ","), err)
	}
	return nil
}
