package daemon

import (
	"cmp"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/network"
)

// Config is everything a daemon instance needs to know. Several daemons can
// run side by side on one machine when each has its own Root, RunDir,
// Socket, Bridge, Subnet and CgroupParent (tests and the two-host setup do).
type Config struct {
	// Root holds durable state: database, images, storage pool, logs.
	Root string
	// RunDir holds runtime state that ends with the machine: runc state,
	// shim state, network namespace files.
	RunDir string
	// Socket is the path of the API's unix socket.
	Socket string
	// Name is this host's name as shown to clients (default: hostname).
	Name string

	// StorageDriver is "btrfs" (default) or "dir".
	StorageDriver string
	// StorageSource is an existing btrfs directory to use instead of a
	// loop-backed pool file.
	StorageSource string
	// StorageDevice is a block device holding a btrfs filesystem that is
	// mounted as the pool instead of a loop-backed pool file (`vessel
	// admin init --storage-device` formats one).
	StorageDevice string
	// StorageDeviceIdle is BFQ's slice_idle on StorageDevice, written with
	// low_latency off once a disk weight is set on cgroup v2 (0: BFQ's own
	// 8 ms). A longer idle keeps the disk for a weighted reader whose next
	// request comes late (an emulated CPU), at some cost in throughput.
	StorageDeviceIdle time.Duration
	// StorageSize is the size of a new loop-backed pool file in bytes.
	StorageSize int64
	// ImageMaxSize bounds an image once decompressed, in bytes (0:
	// image.DefaultMaxSize): a decompression bomb is stopped there.
	ImageMaxSize int64

	// Listen are HTTPS addresses (host:port) for remote clients and peer
	// hosts; Advertise, if set, are the addresses written into join tokens.
	Listen    []string
	Advertise []string
	// MaxConnections caps the API connections served at once on each
	// listener (unix socket, each HTTPS address); 0: no cap.
	// HTTPReadTimeout bounds reading one request, body included (see
	// server.Limits for the routes exempt from it).
	MaxConnections  int
	HTTPReadTimeout time.Duration

	// Bridge, Subnet and NAT configure the containers' network. IPPool
	// restricts new addresses to part of Subnet; Uplink is an interface to
	// enslave to the bridge; ExternalGateway says the gateway is a router
	// on the uplink's segment (hosts sharing one L2 segment).
	Bridge          string
	Subnet          netip.Prefix
	NAT             bool
	IPPool          netip.Prefix
	Uplink          string
	ExternalGateway bool

	// CgroupParent is the cgroup every container's cgroup lives under.
	CgroupParent string
	// ControlCgroup is the cgroup vesseld moves itself (and so the helper
	// processes it starts) into, beside CgroupParent; default
	// CgroupParent+"-control". "none" keeps vesseld where it was started
	// (under systemd, vessel-control.slice gives the weight).
	ControlCgroup string
	// ControlCPUWeight is the control cgroup's CPU weight on the v2 scale,
	// against the containers' parent's default 100; default 1000 (10x).
	// 0 turns the advantage off: the control cgroup gets 100 too.
	ControlCPUWeight uint64
	// FavorDynMods turns on the host's cgroup2 favordynmods root option at
	// start (see cgroups.FavorDynMods): moving a task between cgroups then
	// no longer waits for an RCU grace period, at some cost to fork and
	// exit. It is host-wide and stays on after vesseld exits.
	FavorDynMods bool

	// Runc, Criu, Shim and Busybox are the external binaries used (empty:
	// looked up in PATH, or next to vesseld for the shim).
	Runc    string
	Criu    string
	Shim    string
	Busybox string

	// VMAgent is the guest agent put in VMs' initramfs as /init (empty:
	// vessel-agent next to vesseld, /usr/lib/vessel/vessel-agent, then
	// PATH). VMKernelDir holds the guest kernel and its modules (default
	// vm.DefaultKernelDir, where scripts/setup.sh unpacks Debian's cloud
	// kernel).
	VMAgent     string
	VMKernelDir string
	// VMRestoreTHP keeps transparent huge pages for the QEMU a stateful
	// restore starts. By default it runs with them off (qemu.Config.NoTHP):
	// the load faults all guest RAM in at once, and where the host hands
	// out huge pages slowly (this development machine: ~5x the cost of
	// small ones) the load runs at a fraction of the disk's speed.
	VMRestoreTHP bool
	// VMAnonymousRAM runs VMs on anonymous RAM (QEMU's default) instead
	// of a shared RAM file a stateful restore hands to the next QEMU
	// (vm_ram.go).
	VMAnonymousRAM bool
	// VMRAMSmallPages gives the RAM files' tmpfs huge=never instead of
	// huge=advise (vmRAMHugeOption), for comparison.
	VMRAMSmallPages bool

	// Subuid and Subgid are the subordinate id files unprivileged
	// containers take their ids from (default /etc/subuid, /etc/subgid).
	Subuid string
	Subgid string
	// AcceptPrivileged lets peers move privileged containers in
	// (security.privileged=true): such a container is root on this host.
	AcceptPrivileged bool
	// DefaultLimits are limits.* keys applied to every instance that does
	// not set them (see limits_default.go). fill derives limits.processes
	// and limits.memory from the host and puts these over them: a value
	// "unlimited" turns a default off, an empty one drops it. After fill
	// it holds the defaults in force.
	DefaultLimits map[string]string

	// StopTimeout is how long a graceful stop may take by default.
	StopTimeout time.Duration
	// RestoreTimeout bounds a migration target's CRIU restore: a restore
	// that has not finished by then is killed and reported as failed, so
	// the source resumes the container instead of staying frozen.
	RestoreTimeout time.Duration

	// MigrationTimeout bounds an incoming migration session from its
	// Hello until its container runs here (it holds a name and an
	// address meanwhile); a session still receiving then is rolled back.
	MigrationTimeout time.Duration
	// MigrationSessions is how many incoming sessions one peer may have
	// at once (negative: no limit).
	MigrationSessions int
	// MigrationImageLimit bounds, in bytes, the checkpoint images and
	// page files of an incoming session for a container without
	// limits.memory (with one: limits.memory plus 64 MiB). Default: the
	// host's memory; negative lifts the limit.
	MigrationImageLimit int64

	// SnapshotIO says who writes a checkpoint's memory pages:
	// SnapshotIOVessel (default: vessel's O_DIRECT writer) or
	// SnapshotIOCRIU (CRIU alone, then an fsync; kept to measure the
	// difference). On restore CRIU reads them itself either way.
	SnapshotIO string
	// SnapshotMemory says when a stateful snapshot's memory is written:
	// SnapshotMemoryBackground (default: after the thaw, the pages
	// write-protected until saved; needs CRIU's patch 0012, else as
	// frozen) or SnapshotMemoryFrozen (all of it while frozen; kept to
	// measure the difference).
	SnapshotMemory string

	// Faults are injected failures for tests: point -> action (see
	// faults.go). Empty in production.
	Faults map[string]string

	// KeepMigrationFiles keeps each migration's checkpoint images and CRIU
	// logs under RUN/migrate-kept/ (diagnostics).
	KeepMigrationFiles bool
}

// Values of Config.SnapshotIO.
const (
	SnapshotIOVessel = "vessel"
	SnapshotIOCRIU   = "criu"
)

// Values of Config.SnapshotMemory.
const (
	SnapshotMemoryBackground = "background"
	SnapshotMemoryFrozen     = "frozen"
)

// Default values.
const (
	DefaultRoot         = "/var/lib/vessel"
	DefaultRunDir       = "/run/vessel"
	DefaultBridge       = "vesselbr0"
	DefaultSubnet       = "10.87.0.0/24"
	DefaultCgroupParent = "/vessel"
	// DefaultControlCPUWeight is 10x the containers' parent's weight, as
	// XenServer's control slice (CPUShares=10240) had.
	DefaultControlCPUWeight = 1000
	// NoControlCgroup as ControlCgroup keeps vesseld where it started.
	NoControlCgroup = "none"
	// shimsCgroup is the cgroup, below CgroupParent, that shims move into
	// once their container runs: the data path's side. Its name cannot be
	// an instance name (no underscores there).
	shimsCgroup        = "_shims"
	DefaultStorageSize = 20 << 30
	DefaultStopTimeout = 30 * time.Second
	// DefaultRestoreTimeout leaves room for reading tens of GiB of memory
	// image in a copy-mode restore.
	DefaultRestoreTimeout = 5 * time.Minute
	// DefaultMaxConnections and DefaultHTTPReadTimeout are the API
	// server's (see server.Limits).
	DefaultMaxConnections  = 1024
	DefaultHTTPReadTimeout = 30 * time.Second
	// DefaultMigrationTimeout leaves room for a few GiB of disk over a
	// slow link; a session that needs longer asks for a bigger one.
	DefaultMigrationTimeout = 15 * time.Minute
	// DefaultMigrationSessions is a peer's concurrent incoming sessions.
	DefaultMigrationSessions = 4
	DefaultBusybox           = "/bin/busybox"
)

// DefaultConfig returns the configuration of a stand-alone host.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Root:          DefaultRoot,
		RunDir:        DefaultRunDir,
		Name:          host,
		StorageDriver: "btrfs",
		StorageSize:   DefaultStorageSize,
		Bridge:        DefaultBridge,
		Subnet:        netip.MustParsePrefix(DefaultSubnet),
		NAT:           true,
		CgroupParent:  DefaultCgroupParent,
		// ControlCgroup follows CgroupParent (see fill).
		ControlCPUWeight:    DefaultControlCPUWeight,
		FavorDynMods:        true,
		Busybox:             DefaultBusybox,
		StopTimeout:         DefaultStopTimeout,
		RestoreTimeout:      DefaultRestoreTimeout,
		MigrationTimeout:    DefaultMigrationTimeout,
		MigrationSessions:   DefaultMigrationSessions,
		MigrationImageLimit: hostMemory(),
		SnapshotIO:          SnapshotIOVessel,
		SnapshotMemory:      SnapshotMemoryBackground,
		MaxConnections:      DefaultMaxConnections,
		HTTPReadTimeout:     DefaultHTTPReadTimeout,
	}
}

// DefaultSocket returns the API socket path for a root directory.
func DefaultSocket(root string) string { return filepath.Join(root, "unix.socket") }

func (c *Config) fill() error {
	def := DefaultConfig()
	if c.Root == "" {
		c.Root = def.Root
	}
	if c.RunDir == "" {
		c.RunDir = def.RunDir
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket(c.Root)
	}
	if c.Name == "" {
		c.Name = def.Name
	}
	if c.StorageDriver == "" {
		c.StorageDriver = def.StorageDriver
	}
	if c.StorageSource != "" && c.StorageDevice != "" {
		return errorf(ErrInvalid, "storage source %q and storage device %q are exclusive", c.StorageSource, c.StorageDevice)
	}
	if c.StorageDevice != "" && c.StorageDriver != "btrfs" {
		return errorf(ErrInvalid, "storage device %q needs the btrfs driver, not %q", c.StorageDevice, c.StorageDriver)
	}
	if c.StorageSize == 0 {
		c.StorageSize = def.StorageSize
	}
	if c.Bridge == "" {
		c.Bridge = def.Bridge
	}
	if !c.Subnet.IsValid() {
		c.Subnet = def.Subnet
	}
	if c.CgroupParent == "" {
		c.CgroupParent = def.CgroupParent
	}
	if c.ControlCgroup == "" {
		c.ControlCgroup = c.CgroupParent + "-control"
	}
	if c.ControlCgroup != NoControlCgroup && (c.ControlCgroup == c.CgroupParent ||
		strings.HasPrefix(c.ControlCgroup, c.CgroupParent+"/")) {
		return errorf(ErrInvalid, "control cgroup %q must not be inside the containers' cgroup %q", c.ControlCgroup, c.CgroupParent)
	}
	if c.ControlCPUWeight > cgroups.MaxCPUWeight {
		return errorf(ErrInvalid, "control CPU weight %d: want 0 (off) or 1..%d", c.ControlCPUWeight, cgroups.MaxCPUWeight)
	}
	if c.Busybox == "" {
		c.Busybox = def.Busybox
	}
	if c.MaxConnections < 0 {
		return errorf(ErrInvalid, "max connections %d: want 0 (no cap) or more", c.MaxConnections)
	}
	if c.HTTPReadTimeout <= 0 {
		c.HTTPReadTimeout = def.HTTPReadTimeout
	}
	limits, err := effectiveDefaultLimits(c.DefaultLimits)
	if err != nil {
		return err
	}
	c.DefaultLimits = limits
	if c.StopTimeout == 0 {
		c.StopTimeout = def.StopTimeout
	}
	if c.SnapshotIO == "" {
		c.SnapshotIO = def.SnapshotIO
	}
	if c.SnapshotMemory == "" {
		c.SnapshotMemory = def.SnapshotMemory
	}
	if c.MigrationTimeout <= 0 {
		c.MigrationTimeout = def.MigrationTimeout
	}
	if c.MigrationSessions == 0 {
		c.MigrationSessions = def.MigrationSessions
	}
	if c.MigrationImageLimit == 0 {
		c.MigrationImageLimit = def.MigrationImageLimit
	}
	if c.SnapshotIO != SnapshotIOVessel && c.SnapshotIO != SnapshotIOCRIU {
		return errorf(ErrInvalid, "snapshot I/O %q: want %q or %q", c.SnapshotIO, SnapshotIOVessel, SnapshotIOCRIU)
	}
	if c.SnapshotMemory != SnapshotMemoryBackground && c.SnapshotMemory != SnapshotMemoryFrozen {
		return errorf(ErrInvalid, "snapshot memory %q: want %q or %q", c.SnapshotMemory, SnapshotMemoryBackground, SnapshotMemoryFrozen)
	}
	for _, p := range []string{c.Root, c.RunDir, c.Socket} {
		if !filepath.IsAbs(p) {
			return errorf(ErrInvalid, "path %q must be absolute", p)
		}
	}
	return nil
}

// paths derived from the configuration.
func (c *Config) certPath() string             { return filepath.Join(c.Root, "server.crt") }
func (c *Config) keyPath() string              { return filepath.Join(c.Root, "server.key") }
func (c *Config) dbPath() string               { return filepath.Join(c.Root, "vessel.db") }
func (c *Config) lockPath() string             { return filepath.Join(c.Root, "vesseld.lock") }
func (c *Config) imagesDir() string            { return filepath.Join(c.Root, "images") }
func (c *Config) poolRoot() string             { return filepath.Join(c.Root, "storage-pools", "default") }
func (c *Config) poolFile() string             { return filepath.Join(c.Root, "disks", "default.img") }
func (c *Config) bundleDir(name string) string { return filepath.Join(c.Root, "containers", name) }
func (c *Config) logPath(name string) string {
	return filepath.Join(c.Root, "logs", name, "console.log")
}

// privateDirs are the directories of the state tree only root may enter:
// ROOT itself and, each also 0700 for defence in depth, the directories
// leading to the pool, bundles, logs and images.
func (c *Config) privateDirs() []string {
	return []string{
		c.Root, c.imagesDir(), filepath.Dir(c.poolFile()), filepath.Dir(c.poolRoot()),
		filepath.Join(c.Root, "containers"), filepath.Join(c.Root, "logs"),
	}
}

func (c *Config) runcRoot() string { return filepath.Join(c.RunDir, "runc") }
func (c *Config) shimDir() string  { return filepath.Join(c.RunDir, "shims") }
func (c *Config) emptyDir() string { return filepath.Join(c.RunDir, "empty") }

// rootfsDir holds an unprivileged container's idmapped rootfs mount
// (rootfsMount): it is owned by the container's root and searchable by it
// alone, so no other host user reaches the container's files that way.
func (c *Config) rootfsDir(name string) string   { return filepath.Join(c.RunDir, "rootfs", name) }
func (c *Config) rootfsMount(name string) string { return filepath.Join(c.rootfsDir(name), "rootfs") }

// sysfsDir holds a sysfs mounted from inside a container's netns.
func (c *Config) sysfsDir(name string) string { return filepath.Join(c.RunDir, "sysfs", name) }
func (c *Config) subuidPath() string          { return cmp.Or(c.Subuid, defaultSubuid) }
func (c *Config) subgidPath() string          { return cmp.Or(c.Subgid, defaultSubgid) }
func (c *Config) netnsDir() string            { return filepath.Join(c.RunDir, "netns") }

// vmRunDir holds a running VM's sockets and pidfile; vmAssetsDir the
// initramfs images built for VMs.
func (c *Config) vmRunDir(name string) string { return filepath.Join(c.RunDir, "vm", name) }
func (c *Config) vmAssetsDir() string         { return filepath.Join(c.Root, "vm") }
func (c *Config) cgroupPath(name string) string {
	return filepath.Join(c.CgroupParent, name)
}
func (c *Config) shimsCgroupPath() string { return filepath.Join(c.CgroupParent, shimsCgroup) }

// hostMemory returns the host's memory in bytes (0 if unknown).
func hostMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

func (c *Config) networkConfig() network.Config {
	return network.Config{Bridge: c.Bridge, Subnet: c.Subnet, NetnsDir: c.netnsDir(), NAT: c.NAT,
		Pool: c.IPPool, Uplink: c.Uplink, ExternalGateway: c.ExternalGateway}
}
