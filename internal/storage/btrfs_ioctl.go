package storage

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// btrfsIocFsInfo is BTRFS_IOC_FS_INFO, _IOR(0x94, 31, struct
// btrfs_ioctl_fs_info_args), from linux/btrfs.h; golang.org/x/sys has no
// btrfs ioctls. The argument is 1024 bytes: max_id and num_devices (two
// __u64), then the 16-byte fsid, then fields not read here.
const (
	btrfsIocFsInfo     = 0x8400941f
	btrfsFsInfoSize    = 1024
	btrfsFsInfoFsidOff = 16
)

// btrfsFsid returns the UUID of the btrfs filesystem holding path, as named
// in /sys/fs/btrfs/.
func btrfsFsid(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("btrfs filesystem id: %w", err)
	}
	defer f.Close()
	var args [btrfsFsInfoSize]byte
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), btrfsIocFsInfo, uintptr(unsafe.Pointer(&args[0])))
	if errno != 0 {
		return "", fmt.Errorf("btrfs filesystem id of %s: BTRFS_IOC_FS_INFO: %w", path, errno)
	}
	u := args[btrfsFsInfoFsidOff : btrfsFsInfoFsidOff+16]
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}
