package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// removeTree removes dir and everything in it, after detaching whatever is
// mounted at or under it. If a mount cannot be detached, nothing is
// removed: os.RemoveAll would descend into the mount (say, a bind mount of
// the host's /dev) and delete what is there.
func removeTree(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unmountUnder lazily detaches every mount at or below dir, deepest first,
// and fails if any is left.
func unmountUnder(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return nil
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Mountpoint, err))
		}
	}
	left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err != nil {
		return err
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d mounts left under %s", len(left), real))
	}
	return errors.Join(errs...)
}
