package storage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// btrfs receive runs jailed: a send stream comes from a peer host, and
// btrfs receive (as root) creates, writes, renames and links whatever
// paths the stream names. The jail is
//
//   - `btrfs receive --chroot`: every path of the stream resolves inside
//     the receive directory (snapshots/NAME), ".." and absolute symlinks
//     included;
//   - a private mount namespace of its own, in which everything of the
//     pool but the receive directory is covered by an empty read-only
//     tmpfs (images/, containers/, checkpoints/ and every other
//     snapshots/* directory): btrfs receive opens a clone's source and an
//     incremental stream's parent relative to the pool's root, outside its
//     chroot, and there it finds nothing but what it received itself;
//   - sendChecker in front of it (btrfs_stream_check.go), which refuses
//     absolute and ".." paths before btrfs sees them.
//
// The namespace is made on a locked OS thread of this process that
// starts btrfs and then exits (the thread is never unlocked, so Go ends
// it): no helper binary, and the host's mount table never changes.

// jailedStart starts cmd in a new private mount namespace in which every
// entry of pool other than keepTop, and every entry of pool/keepTop other
// than keep, is covered by an empty read-only tmpfs.
func jailedStart(cmd *exec.Cmd, pool, keepTop, keep string) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: Go ends the thread with this goroutine. It
		// returns to the host's namespace first all the same: the main
		// thread is not ended but parked for good, and must not keep the
		// jail's namespace (and the pool's mount) alive.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			errc <- fmt.Errorf("receive jail: %w", err)
			return
		}
		defer host.Close()
		if err = enterJail(pool, keepTop, keep); err == nil {
			err = cmd.Start()
		} else {
			err = fmt.Errorf("receive jail: %w", err)
		}
		if serr := unix.Setns(int(host.Fd()), unix.CLONE_NEWNS); serr != nil && err == nil {
			err = fmt.Errorf("receive jail: back to the host's mount namespace: %w", serr)
		}
		errc <- err
	}()
	return <-errc
}

// enterJail moves the calling thread into a new mount namespace and hides
// the pool's other trees there.
func enterJail(pool, keepTop, keep string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := coverExcept(pool, keepTop); err != nil {
		return err
	}
	return coverExcept(filepath.Join(pool, keepTop), keep)
}

// coverExcept mounts an empty read-only tmpfs over every directory in dir
// except keep (files are left: the pool holds none at these levels).
func coverExcept(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == keep || !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		err := unix.Mount("jail", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0500")
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("cover %s: %w", p, err)
		}
	}
	return nil
}
