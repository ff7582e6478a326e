package daemon

import (
	"context"
	"net"
	"net/netip"
	"syscall"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// The daemon's seams: what it needs of each component, declared here where
// it is used. New wires the real implementations (runtime.Runtime,
// network.Manager, cgroups.New, client.Client); the unit tests wire fakes,
// so the decision logic (reconcile, settle, transitions) runs without root.
// The state store and the storage pool are used as they are: the real
// bbolt store and dir driver need no root, so the tests use them too.

// instanceRuntime runs an instance's processes: runc under shims today
// (runtime.Runtime). Nothing above it assumes runc.
type instanceRuntime interface {
	Start(ctx context.Context, id, bundle string, o runtime.StartOptions) (runtime.Process, error)
	// PrepareRestore readies a restore whose images may still be coming
	// or whose root filesystem is still being rolled back (CRIU
	// started, the container's cgroups and namespaces set): the frozen
	// window holds only its Run.
	PrepareRestore(ctx context.Context, id, bundle string, o runtime.RestoreOptions) (runtime.Restorer, error)
	// State reports the processes' status and init pid; StatusUnknown
	// (and no error) when the runtime does not know the instance.
	State(ctx context.Context, id string) (runtime.Status, int, error)
	// Watch delivers the exit of the instance's processes, also of ones a
	// previous daemon started.
	Watch(id string) (<-chan runtime.Exit, error)
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	Kill(ctx context.Context, id string) error
	// Delete removes the runtime's state of the instance, whatever it is.
	Delete(ctx context.Context, id string) error
	// ReleaseRestoreRoot unmounts the root filesystem a restore of a
	// dead daemon left bound for CRIU (nothing there is not an error).
	ReleaseRestoreRoot(id string) error
	Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error)
	// NewCheckpoint prepares a checkpoint session (see checkpoint.go).
	NewCheckpoint(ctx context.Context, id string, o runtime.CheckpointOptions) (*runtime.Checkpoint, error)
	StartLazyPages(ctx context.Context, o runtime.LazyPagesOptions) (*runtime.LazyPages, error)
	// LazyPagesEarly says whether StartLazyPages can start the daemon
	// before its images are in (LazyPagesOptions.ImagesLater).
	LazyPagesEarly() bool
	// PrepareIDMap readies what MountIDMapped needs for m, ahead of it;
	// ReleaseIDMap drops it. MountIDMapped mounts an unprivileged
	// container's rootfs with its ids shifted (a mount already there is
	// replaced).
	PrepareIDMap(dst string, m runtime.IDMap) error
	ReleaseIDMap(m runtime.IDMap)
	MountIDMapped(src, dst string, m runtime.IDMap) error
	UnmountIDMapped(dst string) error
}

// instanceNetwork gives instances their addresses and links
// (network.Manager).
type instanceNetwork interface {
	Setup(ctx context.Context) error
	Teardown(ctx context.Context) error
	Allocate(used []netip.Addr) (netip.Addr, error)
	CheckAddress(addr netip.Addr, used []netip.Addr) error
	// Attach makes the instance's network namespace and link; Detach
	// removes them (nothing there is not an error).
	Attach(ctx context.Context, name string, addr netip.Addr) (network.Endpoint, error)
	// AttachTap makes a VM's link instead: a filtered tap on the bridge
	// (Detach, Guard and SetHostLink act on it as on a veth).
	AttachTap(ctx context.Context, name string, addr netip.Addr) (network.Endpoint, error)
	Detach(ctx context.Context, name string) error
	// Guard installs again the anti-spoofing filter of an attached
	// instance's port (an adopted container's).
	Guard(ctx context.Context, name string, addr netip.Addr) error
	// SetHostLink takes the host side of the link down (the migration's
	// network lock) or up.
	SetHostLink(name string, up bool) error
	// Announce sends gratuitous ARP for the instance's address from its
	// link (after a restore: the segment learns where it is now).
	Announce(ctx context.Context, name string) error
	// MountSysfs mounts on dir a sysfs seen from inside the instance's
	// network namespace (for an unprivileged container's /sys).
	MountSysfs(name, dir string) error
	UnmountSysfs(dir string) error
}

// vmRunner runs VM instances' QEMU processes (qemuRunner: internal/qemu,
// with the boot assets of internal/vm).
type vmRunner interface {
	// Accel is the accelerator VMs get on this host.
	Accel() qemu.AccelInfo
	// BuildDisk makes dir/disk.img from an image's root filesystem.
	BuildDisk(ctx context.Context, rootfs, dir string) error
	// Start starts QEMU for cfg (the runner fills in the kernel, the
	// initramfs and the disk's I/O options) and returns once it runs
	// detached, paused if cfg says so.
	Start(ctx context.Context, cfg qemu.Config) (vmProcess, error)
	// Find returns the VM's live QEMU, also one an earlier daemon
	// started; an error wrapping qemu.ErrNotRunning when there is none.
	Find(runDir, name string) (vmProcess, error)
	// Monitor connects to a VM's QMP socket.
	Monitor(ctx context.Context, socket string) (vmMonitor, error)
	// Events returns the events of a VM's events monitor until ctx ends
	// or QEMU does (then the channel is closed).
	Events(ctx context.Context, socket string) (<-chan qemu.Event, error)
}

// vmProcess is a running QEMU (qemu.Process).
type vmProcess interface {
	Pid() int
	// Done is closed when the process has ended.
	Done() <-chan struct{}
	// Kill ends it at once and waits for its end.
	Kill(ctx context.Context) error
}

// vmMonitor is a QMP connection (qemu.Monitor).
type vmMonitor interface {
	QueryStatus(ctx context.Context) (qemu.Status, error)
	Cont(ctx context.Context) error
	Stop(ctx context.Context) error
	SystemPowerdown(ctx context.Context) error
	SetIOThrottle(ctx context.Context, t qemu.IOThrottle) error
	// Run is one raw QMP command (qemu.Runner: qemu.Save and qemu.Load).
	Run(cmd []byte) ([]byte, error)
	Close() error
}

// cgroupsFunc opens the cgroup at a path (cgroups.New).
type cgroupsFunc func(path string, opts ...cgroups.Option) (cgroups.Manager, error)

// peerAPI is what the daemon asks of a peer host (client.Client).
type peerAPI interface {
	// Instance asks whether (and how) an instance is there.
	Instance(ctx context.Context, name string) (api.Instance, error)
	// Upgrade opens a migration session.
	Upgrade(ctx context.Context, path, protocol string) (net.Conn, error)
	// UpgradeWith is Upgrade with the raw connection under TLS wrapped
	// (a post-copy move's page link).
	UpgradeWith(ctx context.Context, path, protocol string, raw func(net.Conn) net.Conn) (net.Conn, error)
}

// peerFunc connects to a peer host with this host's identity.
type peerFunc func(p state.Peer) peerAPI
