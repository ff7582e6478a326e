package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap maps a container's ids 0..Size-1 to a host range: an unprivileged
// container's user namespace, and the idmapped mount of its rootfs.
type IDMap struct {
	HostUID uint32 `json:"host_uid"`
	HostGID uint32 `json:"host_gid"`
	Size    uint32 `json:"size"`
}

// Validate refuses maps that would give a container host root or wrap.
func (m *IDMap) Validate() error {
	switch {
	case m.Size == 0:
		return fmt.Errorf("%w: empty id map", ErrInvalid)
	case m.HostUID == 0 || m.HostGID == 0:
		return fmt.Errorf("%w: id map %d:%d would include host root", ErrInvalid, m.HostUID, m.HostGID)
	case uint64(m.HostUID)+uint64(m.Size) > 1<<32-1 || uint64(m.HostGID)+uint64(m.Size) > 1<<32-1:
		return fmt.Errorf("%w: id map %d:%d+%d overflows", ErrInvalid, m.HostUID, m.HostGID, m.Size)
	}
	return nil
}

// PrepareIDMap readies an idmapped mount of map m on dst: the user
// namespace it needs (a few milliseconds, so that a mount made while a
// container is frozen, a migration target's, costs only the mount), and
// dst itself in a directory that only the container's root may pass (mode
// 0100): runc's init, in the container's user namespace, must reach the
// rootfs; no other host user may. Its parent is made 0711. ReleaseIDMap
// drops the user namespace.
func (r *Runtime) PrepareIDMap(dst string, m IDMap) error {
	if err := m.Validate(); err != nil {
		return err
	}
	dir := filepath.Dir(dst)
	for _, step := range []func() error{
		func() error { return os.MkdirAll(filepath.Dir(dir), 0o711) },
		func() error { return os.Chmod(filepath.Dir(dir), 0o711) },
		func() error { return os.MkdirAll(dst, 0o700) },
		func() error { return os.Chown(dir, int(m.HostUID), int(m.HostGID)) },
		func() error { return os.Chmod(dir, 0o100) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("idmapped mount point: %w", err)
		}
	}
	_, err := r.usernsFor(m)
	return err
}

// ReleaseIDMap closes the user namespace kept for m, if any.
func (r *Runtime) ReleaseIDMap(m IDMap) {
	r.usernsMu.Lock()
	defer r.usernsMu.Unlock()
	if f := r.userns[m]; f != nil {
		f.Close()
		delete(r.userns, m)
	}
}

// usernsFor returns the kept user namespace of m, made if needed.
func (r *Runtime) usernsFor(m IDMap) (*os.File, error) {
	r.usernsMu.Lock()
	defer r.usernsMu.Unlock()
	if f := r.userns[m]; f != nil {
		return f, nil
	}
	f, err := r.newUserns(m)
	if err != nil {
		return nil, err
	}
	if r.userns == nil {
		r.userns = map[IDMap]*os.File{}
	}
	r.userns[m] = f
	return f, nil
}

// newUserns returns an fd of a new user namespace with map m. A child is
// cloned into it and traced, so it stops at its exec before running
// anything (the Go runtime writes the maps before Start returns); its
// namespace is opened and the child killed: ~0.7 ms, where a child that
// ran until told to exit took ~5 ms.
func (r *Runtime) newUserns(m IDMap) (*os.File, error) {
	// The tracer is this thread: it must also be the one that reaps.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	cmd := exec.Command(r.cfg.Shim)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostUID), Size: int(m.Size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostGID), Size: int(m.Size)}},
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return f, nil
}

// MountIDMapped mounts src on dst (an existing empty directory) with its
// ids shifted by m: files owned by 0 on disk appear owned by m.HostUID, so
// the tree on disk stays unshifted and shared by images, clones and
// snapshots, whatever range the container gets. A mount already on dst is
// replaced.
func (r *Runtime) MountIDMapped(src, dst string, m IDMap) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if err := unmountAll(dst); err != nil {
		return err
	}
	ns, err := r.usernsFor(m)
	if err != nil {
		return err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("idmapped mount of %s: open_tree: %w", src, err)
	}
	defer unix.Close(fd)
	// The pool is mounted nosuid (a setuid file in a rootfs must not
	// make a host user root). Through the idmapped mount a setuid file
	// only gives the container's own ids, and no other host user can
	// pass the mount point's directory: setuid works again inside.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Attr_clr: unix.MOUNT_ATTR_NOSUID, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmapped mount of %s: mount_setattr: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmapped mount of %s on %s: %w", src, dst, err)
	}
	return nil
}

// UnmountIDMapped detaches the mount on dst and removes dst and the
// directory PrepareIDMap made for it; nothing there is not an error.
func (r *Runtime) UnmountIDMapped(dst string) error {
	if err := unmountAll(dst); err != nil {
		return err
	}
	for _, d := range []string{dst, filepath.Dir(dst)} {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// unmountAll detaches whatever is mounted on dst; nothing mounted (or no
// dst) is not an error.
func unmountAll(dst string) error {
	for {
		err := unix.Unmount(dst, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue // stacked mounts: detach them all
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", dst, err)
		}
	}
}
