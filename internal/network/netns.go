package network

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ensureNetnsDir creates dir and makes it a private mount, bind-mounting it
// on itself first if it is not a mount point yet (the trick `ip netns add`
// plays with /run/netns). Private propagation keeps the nsfs mounts made in
// it from being copied into, or held by, peer mount namespaces.
func ensureNetnsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// Changing propagation fails with EINVAL unless dir is a mount's root.
	err := unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	if errors.Is(err, unix.EINVAL) {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s on itself: %w", dir, err)
		}
		err = unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	}
	if err != nil {
		return fmt.Errorf("make %s a private mount: %w", dir, err)
	}
	return nil
}

// removeNetnsDir removes dir if it holds no file; a dir with netns files in
// it is left as it is. A mount on dir (Setup's bind mount) is detached first.
func removeNetnsDir(dir string) error {
	empty, err := dirEmpty(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !empty {
		return nil
	}
	mounted, err := mountinfo.Mounted(dir)
	if err != nil {
		return fmt.Errorf("check mount on %s: %w", dir, err)
	}
	if mounted {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// dirEmpty reports whether dir has no entries.
func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", dir, err)
	}
	return false, nil
}

// Socket hash tables of a container's network namespace. A namespace
// shares the host's TCP established table and UDP tables unless the
// namespace it was made from set net.ipv4.tcp_child_ehash_entries and
// udp_child_hash_entries (Linux 6.1 and 6.2), and every dump of the
// namespace's sockets (sock_diag: CRIU's dump, ss) walks all of a table's
// buckets, the host's 262144 TCP and 16384 UDP slots on a 23 GiB host:
// ~5 ms of each live move's frozen window there (CRIU's socket
// collection), growing with the host's memory. Tables of their own are
// sized for a container: 16384 TCP buckets (lookups stay short past
// 10,000 connections), 1024 UDP slots.
const (
	netnsTCPEhashEntries = 16384
	netnsUDPHashEntries  = 1024
)

// createNetns creates a new network namespace and bind-mounts it on path,
// which must not exist. The calling goroutine's namespace is not changed:
// the work runs on a separate goroutine locked to its own OS thread.
//
// The namespace is made from parent (tableParent's), whose child-table
// sysctls are set (see netnsTCPEhashEntries), so it gets socket tables of
// its own without a host-wide setting changed. The limits the kernel
// derives from the table's size (tcp_max_tw_buckets, tcp_max_syn_backlog)
// are set back to the host's values. A kernel without the sysctls, or
// one that cannot allocate the tables, gives the namespace the host's, as
// before.
func createNetns(path string, parent netns.NsHandle) (err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	// The TCP limits the kernel sizes by a namespace's established table
	// (half its buckets for TIME-WAIT sockets, one in 128 for the SYN
	// backlog): the container's keep the host's.
	host, err := readNetSysctls("net/ipv4/tcp_max_tw_buckets", "net/ipv4/tcp_max_syn_backlog")
	if err != nil {
		return err
	}
	enter := func() error {
		if err := netns.Set(parent); err != nil {
			return err
		}
		return unix.Unshare(unix.CLONE_NEWNET)
	}
	return onThreadIn(enter, func() error {
		if err := writeNetSysctls(host); err != nil {
			return err
		}
		// ICMP echo sockets for every group: an unprivileged container's
		// root has no CAP_NET_RAW over this namespace (the host's user
		// namespace owns it), and ping works through these instead.
		if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0); err != nil {
			return err
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount new netns on %s: %w", path, err)
		}
		return nil
	})
}

// tableParent is the network namespace a Manager makes containers'
// namespaces from: a namespace of vesseld's own (no process, no link; an
// open descriptor holds it until the daemon exits) in which the
// child-table sysctls are set. It is made once, at the first container's
// namespace: one made and dropped per container would be torn down by the
// kernel's cleanup_net shortly after, and a migration target makes the
// container's namespace just before the source freezes (that teardown,
// tens of ms of RCU waits and rtnl work on a 2-core host, then overlaps
// the restore).
type tableParent struct {
	mu sync.Mutex
	h  netns.NsHandle
	ok bool
}

// get returns the parent namespace, making it first if need be.
func (p *tableParent) get() (netns.NsHandle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ok {
		return p.h, nil
	}
	var h netns.NsHandle
	err := onThreadIn(func() error { return unix.Unshare(unix.CLONE_NEWNET) }, func() error {
		// The child-table sysctls (those this kernel has).
		if err := writeNetSysctls(map[string]string{
			"net/ipv4/tcp_child_ehash_entries": strconv.Itoa(netnsTCPEhashEntries),
			"net/ipv4/udp_child_hash_entries":  strconv.Itoa(netnsUDPHashEntries),
		}); err != nil {
			return err
		}
		var err error
		h, err = netns.Get()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("make the parent netns of containers': %w", err)
	}
	p.h, p.ok = h, true
	return h, nil
}

// readNetSysctls reads the calling thread's namespace's values of names
// (under /proc/sys), skipping those this kernel lacks.
func readNetSysctls(names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, name := range names {
		b, err := os.ReadFile("/proc/sys/" + name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		out[name] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// writeNetSysctls writes values (names under /proc/sys, as
// readNetSysctls') in the calling thread's namespace, skipping those this
// kernel lacks.
func writeNetSysctls(values map[string]string) error {
	for name, v := range values {
		err := os.WriteFile("/proc/sys/"+name, []byte(v), 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// InNamed runs work on an OS thread of its own moved into the network
// namespace named name (under /run/netns, as `ip netns` names them): the
// sockets work makes stay there, whatever thread uses them later. The
// thread moves back afterwards (onThreadIn).
func InNamed(name string, work func() error) error {
	return onThreadIn(func() error {
		h, err := netns.GetFromName(name)
		if err != nil {
			return err
		}
		defer h.Close()
		return netns.Set(h)
	}, work)
}

// onThreadIn runs work on an OS thread of its own that enter has moved
// into another network namespace (the rest of the process, and the
// mount namespace, stay as they are), then moves the thread back. If the
// thread cannot be moved back, its goroutine ends with it still locked,
// and the Go runtime then ends the thread instead of scheduling other
// goroutines on it in the wrong namespace.
func onThreadIn(enter, work func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			// enter may have moved the thread before it failed (a
			// second unshare): back first, or the thread stays locked.
			if serr := netns.Set(orig); serr != nil {
				errc <- errors.Join(fmt.Errorf("enter netns: %w", err), fmt.Errorf("restore netns of thread: %w", serr))
				return
			}
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		workErr := work()
		if err := netns.Set(orig); err != nil {
			// Thread stays locked: see above.
			errc <- errors.Join(workErr, fmt.Errorf("restore netns of thread: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- workErr
	}()
	return <-errc
}

// removeNetns detaches the netns mount on path and removes the file. Both
// may already be gone. Processes still in the namespace keep it alive.
func removeNetns(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	// EINVAL: path is not a mount point (a file left by a crash between
	// creating and mounting it). ENOENT: no file at all.
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns file: %w", err)
	}
	return nil
}

// isNetnsMount reports whether path is a mounted network namespace (nsfs).
func isNetnsMount(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
