package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Loop devices are driven through their ioctls rather than losetup(8): the
// caller needs the device open while it mounts it (see loopDevice), which a
// separate losetup process cannot give.

const (
	loopControl  = "/dev/loop-control"
	sysBlock     = "/sys/block"
	loopPollStep = 10 * time.Millisecond
)

// loopDevice is a loop device, held open by this process if it attached it
// itself. With autoclear set, the kernel detaches the device on its last
// close: so the holder must mount it before Close, and closing it without
// mounting detaches it again (which is also the cleanup when the mount
// fails).
type loopDevice struct {
	// Path is the device node, e.g. /dev/loop3.
	Path string
	f    *os.File
}

// Close releases this process's hold on the device, if it has one.
func (l *loopDevice) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// loopAttachOpts are the options of attachLoop.
type loopAttachOpts struct {
	// Autoclear detaches the device when its last user (the mount) goes.
	Autoclear bool
	// DirectIO makes the device read and write its backing file with
	// O_DIRECT, in blocks of loopDirectBlockSize: the data is cached once
	// (by the filesystem on the device), not a second time in the backing
	// file's page cache. A backing filesystem that cannot do direct I/O
	// gets a buffered device instead.
	DirectIO bool
}

// loopDirectBlockSize is the logical block size of a direct-I/O loop
// device: the page size, which every backing filesystem accepts for
// O_DIRECT and which matches btrfs's sector size.
const loopDirectBlockSize = 4096

// flags returns the LO_FLAGS_* for o.
func (o loopAttachOpts) flags() uint32 {
	var f uint32
	if o.Autoclear {
		f |= unix.LO_FLAGS_AUTOCLEAR
	}
	if o.DirectIO {
		f |= unix.LO_FLAGS_DIRECT_IO
	}
	return f
}

// blockSize returns the logical block size to configure (0: the default).
func (o loopAttachOpts) blockSize() uint32 {
	if o.DirectIO {
		return loopDirectBlockSize
	}
	return 0
}

// loopAttachAttempts bounds retries when another process takes the free
// device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const loopAttachAttempts = 10

// attachLoop binds the file backing to a free loop device, read-write, and
// returns the device held open.
func attachLoop(backing string, opts loopAttachOpts) (*loopDevice, error) {
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device to %s: %w", backing, err)
	}
	defer ctl.Close()
	file, err := os.OpenFile(backing, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device: %w", err)
	}
	defer file.Close() // the loop device keeps its own reference

	for range loopAttachAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop device to %s: LOOP_CTL_GET_FREE: %w", backing, err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("attach loop device to %s: %w", backing, err)
		}
		err = configureLoop(dev, file, opts.flags(), opts.blockSize())
		if err != nil && opts.DirectIO && !errors.Is(err, unix.EBUSY) {
			// The backing filesystem cannot do direct I/O: buffered.
			err = configureLoop(dev, file, opts.flags()&^unix.LO_FLAGS_DIRECT_IO, 0)
		}
		if errors.Is(err, unix.EBUSY) {
			dev.Close() // raced with another process for this device
			continue
		}
		if err != nil {
			dev.Close()
			return nil, fmt.Errorf("attach %s to %s: %w", path, backing, err)
		}
		return holdReadOnly(path, dev)
	}
	return nil, fmt.Errorf("attach loop device to %s: every free device was taken by others (%d attempts)", backing, loopAttachAttempts)
}

// holdReadOnly swaps the read-write handle dev, needed to configure a
// read-write loop device, for a read-only one: a kernel built without
// CONFIG_BLK_DEV_WRITE_MOUNTED refuses to mount a device someone has open
// for writing. The new handle is opened before dev is closed, so the device
// never loses its last user (which would autoclear it).
func holdReadOnly(path string, dev *os.File) (*loopDevice, error) {
	defer dev.Close()
	ro, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return nil, fmt.Errorf("reopen %s: %w", path, err)
	}
	return &loopDevice{Path: path, f: ro}, nil
}

// configureLoop binds file to the loop device dev with the given flags and
// logical block size (0: the default, 512), in
// one step with LOOP_CONFIGURE (Linux 5.8+), else with LOOP_SET_FD and
// LOOP_SET_STATUS64 (where a crash in between leaves the device bound
// without autoclear; Unmount's explicit detach covers that).
func configureLoop(dev, file *os.File, flags, blockSize uint32) error {
	info := unix.LoopInfo64{Flags: flags}
	copy(info.File_name[:len(info.File_name)-1], file.Name())
	// LoopConfig.Size is struct loop_config's block_size.
	cfg := unix.LoopConfig{Fd: uint32(file.Fd()), Size: blockSize, Info: info}
	err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	if !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		return err // nil, or a failure of a kernel that knows LOOP_CONFIGURE
	}
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(file.Fd())); err != nil {
		return fmt.Errorf("LOOP_SET_FD: %w", err)
	}
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("LOOP_SET_STATUS64: %w", err)
	}
	return nil
}

// loopBackingFile returns the file bound to the loop device name ("loop3"),
// and false if the device is not bound. A backing file deleted since is
// reported by the kernel with a " (deleted)" suffix, which is kept.
func loopBackingFile(name string) (string, bool, error) {
	b, err := os.ReadFile(filepath.Join(sysBlock, name, "loop", "backing_file"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		// The loop/ directory exists only while bound; read while the
		// device is being unbound, its file says ENODEV (seen with
		// Debian 13's 6.12 kernel in the guest lane).
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.TrimSuffix(string(b), "\n"), true, nil
}

// findLoops returns the device nodes of every loop device bound to file
// (the same inode, whatever path it was bound by).
func findLoops(file string) ([]string, error) {
	want, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
	}
	names, err := filepath.Glob(filepath.Join(sysBlock, "loop*"))
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, dir := range names {
		name := filepath.Base(dir)
		backing, bound, err := loopBackingFile(name)
		if err != nil {
			return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
		}
		if !bound {
			continue
		}
		if st, err := os.Stat(backing); err == nil && os.SameFile(st, want) {
			devs = append(devs, "/dev/"+name)
		}
	}
	return devs, nil
}

// detachLoop unbinds the loop device at path. If others still hold it open
// (a mount), the kernel only sets autoclear and detaches it when they go.
// Detaching an unbound device is not an error.
func detachLoop(path string) error {
	dev, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("detach %s: %w", path, err)
	}
	defer dev.Close()
	err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: LOOP_CLR_FD: %w", path, err)
	}
	return nil
}

// waitLoopUnbound waits up to timeout for the loop device at path to become
// unbound, and reports whether it did.
func waitLoopUnbound(ctx context.Context, path string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		_, bound, err := loopBackingFile(filepath.Base(path))
		if err != nil || !bound {
			return !bound, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(loopPollStep):
		}
	}
}
