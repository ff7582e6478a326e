package storage

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// BTRFS_IOC_SNAP_CREATE_V2 is _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
// from linux/btrfs.h. The argument is 4096 bytes:
//
//	__s64 fd;            // the source subvolume, open
//	__u64 transid;       // out: unused here
//	__u64 flags;         // BTRFS_SUBVOL_RDONLY, ...
//	__u64 unused[4];     // (a union with the qgroup inheritance fields)
//	char  name[4040];    // the new subvolume's name in the target directory
//
// golang.org/x/sys has neither the request nor the structure.
const (
	btrfsIocSnapCreateV2 = 0x50009417
	btrfsSubvolRdonly    = 1 << 1
	btrfsSubvolNameMax   = 4039 // BTRFS_SUBVOL_NAME_MAX
)

// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2.
type btrfsVolArgsV2 struct {
	Fd      int64
	Transid uint64
	Flags   uint64
	Unused  [4]uint64
	Name    [btrfsSubvolNameMax + 1]byte
}

// snapshotIoctl creates dst as a snapshot of the subvolume src with
// BTRFS_IOC_SNAP_CREATE_V2, without the fork and exec of btrfs(8): this is
// what a frozen container waits for. The kernel flushes src's dirty data
// (delalloc) before it takes the snapshot, so the snapshot holds everything
// written to src before the call.
func snapshotIoctl(src, dst string, readOnly bool) error {
	name := filepath.Base(dst)
	if len(name) > btrfsSubvolNameMax {
		return fmt.Errorf("snapshot %s: name too long", dst)
	}
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: filepath.Dir(dst), Err: err}
	}
	defer unix.Close(dfd)
	args := &btrfsVolArgsV2{Fd: int64(sfd)}
	if readOnly {
		args.Flags = btrfsSubvolRdonly
	}
	copy(args.Name[:], name)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(dfd), btrfsIocSnapCreateV2, uintptr(unsafe.Pointer(args)))
	if errno != 0 {
		err := fmt.Errorf("snapshot %s to %s: BTRFS_IOC_SNAP_CREATE_V2: %w", src, dst, errno)
		if sub, serr := isSubvolume(src); errno == unix.EINVAL && serr == nil && !sub {
			err = fmt.Errorf("%w (%s is not a btrfs subvolume)", err, src)
		}
		return err
	}
	return nil
}
