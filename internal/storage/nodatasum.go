package storage

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// PrepareNoDataSumDir makes dir (and its parents) for files written with
// O_DIRECT (a VM's saved state, a container's checkpoint images) and, on
// btrfs, marks it NODATASUM|NODATACOW (FS_NOCOW_FL, what `chattr +C`
// sets): since kernel 6.14 btrfs serves an O_DIRECT write to a file with
// data checksums as a buffered one, which would undo direct-io. The flag
// is inherited by files created in the directory afterwards only, so a
// btrfs directory that is not already NOCOW must be empty. It reports
// whether the directory is NOCOW. Other filesystems need nothing.
func PrepareNoDataSumDir(dir string) (nocow bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("state dir: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, fmt.Errorf("state dir %s: statfs: %w", dir, err)
	}
	if fs.Type != unix.BTRFS_SUPER_MAGIC {
		return false, nil
	}
	return setNoCOW(dir)
}

// fsNoCOWFL is FS_NOCOW_FL from linux/fs.h (x/sys/unix does not export it).
const fsNoCOWFL = 0x00800000

// setNoCOW sets FS_NOCOW_FL on the empty directory dir.
func setNoCOW(dir string) (bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		return false, fmt.Errorf("state dir: %w", err)
	}
	defer d.Close()
	flags, err := unix.IoctlGetUint32(int(d.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, fmt.Errorf("state dir %s: FS_IOC_GETFLAGS: %w", dir, err)
	}
	if flags&fsNoCOWFL != 0 {
		return true, nil
	}
	if _, err := d.Readdirnames(1); err != io.EOF {
		if err != nil {
			return false, fmt.Errorf("state dir %s: %w", dir, err)
		}
		return false, fmt.Errorf("state dir %s: %w: cannot mark it NODATASUM", dir, errNotEmpty)
	}
	// FS_IOC_SETFLAGS takes a pointer to an int (the kernel reads 32 bits).
	flags |= fsNoCOWFL
	if err := unix.IoctlSetPointerInt(int(d.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		return false, fmt.Errorf("state dir %s: FS_IOC_SETFLAGS NOCOW: %w", dir, err)
	}
	return true, nil
}

// errNotEmpty is returned by PrepareNoDataSumDir for a directory that
// already holds files (the NODATASUM flag only reaches files made after
// it is set).
var errNotEmpty = errors.New("state directory is not empty")
