package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
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

// BTRFS_IOC_GET_SUBVOL_INFO is _IOR(0x94, 60, struct
// btrfs_ioctl_get_subvol_info_args), 504 bytes (from linux/btrfs.h, checked
// with the C compiler) beginning with the subvolume's tree id (__u64). It
// needs no privilege and works on any file of the subvolume.
const (
	btrfsIocGetSubvolInfo = 0x81f8943c
	btrfsSubvolInfoSize   = 504
)

// subvolumeID returns the tree id of the subvolume at path.
func subvolumeID(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var args [btrfsSubvolInfoSize]byte
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocGetSubvolInfo, uintptr(unsafe.Pointer(&args[0])))
	if errno != 0 {
		return 0, fmt.Errorf("subvolume id of %s: BTRFS_IOC_GET_SUBVOL_INFO: %w", path, errno)
	}
	return binary.LittleEndian.Uint64(args[:8]), nil
}

// BTRFS_IOC_SEND is _IOW(0x94, 38, struct btrfs_ioctl_send_args):
//
//	__s64 send_fd;               // where the stream goes
//	__u64 clone_sources_count;
//	__u64 __user *clone_sources; // tree ids extents may be cloned from
//	__u64 parent_root;           // tree id of an incremental send's parent
//	__u64 flags;
//	__u32 version;               // 0: protocol version 1
//	__u8  reserved[28];
const btrfsIocSend = 0x40489426

// btrfsSendArgs is struct btrfs_ioctl_send_args (72 bytes).
type btrfsSendArgs struct {
	SendFd            int64
	CloneSourcesCount uint64
	CloneSources      *uint64
	ParentRoot        uint64
	Flags             uint64
	Version           uint32
	Reserved          [28]byte
}

// sendIoctl writes the btrfs send stream (protocol version 1) of the
// read-only subvolume at path to w, the difference from the read-only
// subvolume at parent if not empty (which is also its one clone source,
// as `btrfs send -p` makes it): what `btrfs send` does, without its fork
// and exec, which a frozen container waits for in a live move's final
// pass. The kernel writes the stream into a pipe; a goroutine copies it
// to w. A failed write to w or a cancelled ctx closes the pipe's read
// end, which ends the kernel's send (EPIPE).
//
// The ioctl runs on a locked thread with every signal blocked: a signal
// arriving while the kernel waits for the pipe would end the send with
// ERESTARTSYS, and Go's SA_RESTART handlers would restart the whole
// ioctl, writing a second stream after the first's beginning.
func sendIoctl(ctx context.Context, path, parent string, w io.Writer) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	args := &btrfsSendArgs{}
	var parentID uint64
	if parent != "" {
		if parentID, err = subvolumeID(parent); err != nil {
			return err
		}
		args.ParentRoot, args.CloneSources, args.CloneSourcesCount = parentID, &parentID, 1
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("btrfs send: pipe: %w", err)
	}
	// The read end goes to Go's poller (so Close wakes a blocked read);
	// the kernel's end stays blocking (it fails on EAGAIN).
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return fmt.Errorf("btrfs send: pipe: %w", err)
	}
	rd := os.NewFile(uintptr(p[0]), "btrfs send")
	defer rd.Close()
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, rd)
		if err != nil {
			rd.Close() // the kernel's next write fails
		}
		copied <- err
	}()
	stop := context.AfterFunc(ctx, func() { rd.Close() })
	defer stop()
	args.SendFd = int64(p[1])
	serr := sendSyscall(fd, args)
	runtime.KeepAlive(&parentID)
	unix.Close(p[1]) // the copy reads to the stream's end
	cerr := <-copied
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("btrfs send %s: %w", path, ctx.Err())
	case cerr != nil && !errors.Is(cerr, os.ErrClosed):
		return fmt.Errorf("btrfs send %s: %w", path, cerr)
	case serr != nil:
		return fmt.Errorf("btrfs send %s: %w", path, serr)
	case cerr != nil:
		return fmt.Errorf("btrfs send %s: %w", path, cerr)
	}
	return nil
}

// sendSyscall runs BTRFS_IOC_SEND on fd with every signal blocked on a
// locked thread (see sendIoctl).
func sendSyscall(fd int, args *btrfsSendArgs) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, &old); err != nil {
		return fmt.Errorf("block signals: %w", err)
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocSend, uintptr(unsafe.Pointer(args)))
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); err != nil {
		// This thread must not go back to Go's pool with its signals
		// blocked: it stays locked to this goroutine, and the runtime
		// ends it when the goroutine exits.
		runtime.LockOSThread()
	}
	if errno != 0 {
		return fmt.Errorf("BTRFS_IOC_SEND: %w", errno)
	}
	return nil
}
