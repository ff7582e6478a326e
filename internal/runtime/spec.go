package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/shim"
)

// OCIVersion is the ociVersion written into generated specs. runc 1.1.5
// implements spec 1.0.2 and does not check the field, but we claim only
// what it implements.
const OCIVersion = "1.0.2"

// NameAnnotation is the annotation holding the container's id.
const NameAnnotation = "org.vessel.name"

// defaultPath is PATH when the caller's environment has none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SpecOptions describe one system container.
type SpecOptions struct {
	// ID is the container's runc id; it also becomes the NameAnnotation.
	ID string
	// Hostname is set in the container's own UTS namespace.
	Hostname string
	// Rootfs is the absolute path of the container's root filesystem.
	Rootfs string
	// Args, Env and Cwd describe init. Env gets a default PATH and
	// container=vessel unless it sets them; Cwd defaults to "/".
	Args []string
	Env  []string
	Cwd  string
	// Netns is the path of a pre-created network namespace to join; empty
	// means a new namespace with only a loopback device.
	Netns string
	// CgroupsPath is the container's cgroup, cgroupfs style, absolute under
	// each controller (e.g. "/vessel/NAME").
	CgroupsPath string
	// Resources are the cgroup limits; nil means none. The device rules are
	// always replaced by the system container default.
	Resources *specs.LinuxResources
	// ExtraMounts are appended after the standard mounts.
	ExtraMounts []specs.Mount
	// EmptyDir, if set, is an empty host directory: masked directories
	// (/proc/acpi, /sys/firmware...) become read-only bind mounts of it
	// instead of runc's read-only tmpfs mounts. Same protection, but CRIU
	// tars every tmpfs at checkpoint and untars it at restore, while a bind
	// mount costs it nothing: a live migration's frozen time shrinks.
	EmptyDir string
	// IDMap, if set, gives the container a user namespace of its own that
	// maps its ids 0..Size-1 to the host's HostUID.. and HostGID..: an
	// unprivileged container. Its Rootfs must then be an idmapped mount
	// (MountIDMapped) of the on-disk tree with the same map.
	IDMap *IDMap
	// Sysfs is the host path of a sysfs mounted from inside the container's
	// network namespace (network.MountSysfs): an unprivileged container may
	// not mount one, its network namespace belongs to the host. Required
	// with IDMap.
	Sysfs string
}

// systemCaps is what a system container's init and services get: Docker's
// default set plus NET_ADMIN (it has its own network namespace) and
// SYS_BOOT (reboot(2) in a child pid namespace only ends that namespace).
// SYS_RESOURCE, SYS_ADMIN, SYS_MODULE and SYS_PTRACE are left out on
// purpose, and so are SYS_NICE (SCHED_FIFO would escape limits.cpu) and
// IPC_LOCK (mlock beyond RLIMIT_MEMLOCK). In an unprivileged container they
// act in its own user namespace only: NET_ADMIN cannot touch its network,
// which the host's user namespace owns.
var systemCaps = []struct {
	name string
	bit  int
}{
	{"CAP_AUDIT_WRITE", unix.CAP_AUDIT_WRITE},
	{"CAP_CHOWN", unix.CAP_CHOWN},
	{"CAP_DAC_OVERRIDE", unix.CAP_DAC_OVERRIDE},
	{"CAP_FOWNER", unix.CAP_FOWNER},
	{"CAP_FSETID", unix.CAP_FSETID},
	{"CAP_KILL", unix.CAP_KILL},
	{"CAP_MKNOD", unix.CAP_MKNOD},
	{"CAP_NET_ADMIN", unix.CAP_NET_ADMIN},
	{"CAP_NET_BIND_SERVICE", unix.CAP_NET_BIND_SERVICE},
	{"CAP_NET_RAW", unix.CAP_NET_RAW},
	{"CAP_SETFCAP", unix.CAP_SETFCAP},
	{"CAP_SETGID", unix.CAP_SETGID},
	{"CAP_SETPCAP", unix.CAP_SETPCAP},
	{"CAP_SETUID", unix.CAP_SETUID},
	{"CAP_SYS_BOOT", unix.CAP_SYS_BOOT},
	{"CAP_SYS_CHROOT", unix.CAP_SYS_CHROOT},
}

// maskedPaths and readonlyPaths are runc spec's defaults.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap", // RAPL energy counters: a side channel
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// GenerateSpec returns the OCI spec of a system container: its own pid,
// mount, uts, ipc, network and cgroup namespaces, and a user namespace when
// o.IDMap is set; init running as root with a reduced capability set and
// Docker's default seccomp profile, and the usual /proc, /dev, /sys and
// /run mounts.
func GenerateSpec(o SpecOptions) (*specs.Spec, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	caps, err := capabilities()
	if err != nil {
		return nil, err
	}
	rlimits, err := rlimits()
	if err != nil {
		return nil, err
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = "/"
	}
	s := &specs.Spec{
		Version:  OCIVersion,
		Hostname: o.Hostname,
		Root:     &specs.Root{Path: o.Rootfs},
		Process: &specs.Process{
			Args:         slices.Clone(o.Args),
			Env:          initEnv(o.Env),
			Cwd:          cwd,
			User:         specs.User{UID: 0, GID: 0},
			Capabilities: caps,
			Rlimits:      rlimits,
		},
		Mounts:      append(append(systemMounts(o.Sysfs), o.ExtraMounts...), maskMounts(o.EmptyDir)...),
		Annotations: map[string]string{NameAnnotation: o.ID},
		Linux: &specs.Linux{
			Namespaces:    namespaces(o.Netns, o.IDMap != nil),
			CgroupsPath:   o.CgroupsPath,
			Resources:     resources(o.Resources, o.IDMap != nil),
			MaskedPaths:   masked(o.EmptyDir),
			ReadonlyPaths: slices.Clone(readonlyPaths),
		},
	}
	if m := o.IDMap; m != nil {
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostUID, Size: m.Size}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostGID, Size: m.Size}}
	}
	// The profile depends on the capabilities: syscalls such as reboot are
	// allowed only when the matching capability is in the bounding set.
	if s.Linux.Seccomp, err = seccomp.GetDefaultProfile(s); err != nil {
		return nil, fmt.Errorf("%w: seccomp profile: %w", ErrInvalid, err)
	}
	return s, nil
}

func (o *SpecOptions) validate() error {
	switch {
	case !validID(o.ID):
		return fmt.Errorf("%w: container id %q", ErrInvalid, o.ID)
	case !filepath.IsAbs(o.Rootfs):
		return fmt.Errorf("%w: rootfs %q is not an absolute path", ErrInvalid, o.Rootfs)
	case len(o.Args) == 0:
		return fmt.Errorf("%w: no init command", ErrInvalid)
	case o.Cwd != "" && !filepath.IsAbs(o.Cwd):
		return fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, o.Cwd)
	case o.IDMap != nil && !filepath.IsAbs(o.Sysfs):
		return fmt.Errorf("%w: an unprivileged container needs a sysfs path", ErrInvalid)
	}
	if o.IDMap != nil {
		return o.IDMap.Validate()
	}
	return nil
}

// initEnv adds PATH and container=vessel (how systemd and friends detect
// a container) to env unless it sets them.
func initEnv(env []string) []string {
	out := slices.Clone(env)
	has := func(key string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
	}
	if !has("PATH") {
		out = append(out, defaultPath)
	}
	if !has("container") {
		out = append(out, "container=vessel")
	}
	return out
}

func namespaces(netns string, userns bool) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.NetworkNamespace, Path: netns},
		{Type: specs.CgroupNamespace},
	}
	if userns {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UserNamespace})
	}
	return ns
}

// systemMounts are the filesystems every system container gets. /run is a
// fresh tmpfs, as a booting distribution expects; it hides the image's /run.
// With sysfs set, /sys is a read-only bind mount of it instead of a new
// sysfs.
func systemMounts(sysfs string) []specs.Mount {
	sys := specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	if sysfs != "" {
		sys = specs.Mount{Destination: "/sys", Type: "bind", Source: sysfs, Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		sys,
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
	}
}

// maskDir reports whether a masked path is a directory that maskMounts
// covers with a bind mount of emptyDir (the container's /proc and /sys show
// the host kernel's entries, so the host's view tells which exist).
func maskDir(emptyDir, path string) bool {
	// runc refuses mounts inside /proc (other than its own masks), so
	// /proc/acpi and friends stay runc's tmpfs.
	if emptyDir == "" || strings.HasPrefix(path, "/proc/") {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// maskMounts are the read-only bind mounts of emptyDir over the masked
// directories.
func maskMounts(emptyDir string) []specs.Mount {
	var out []specs.Mount
	for _, p := range maskedPaths {
		if maskDir(emptyDir, p) {
			out = append(out, specs.Mount{Destination: p, Type: "bind", Source: emptyDir,
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	return out
}

// masked returns the paths runc masks itself: the files (with /dev/null)
// and the directories maskMounts does not cover.
func masked(emptyDir string) []string {
	var out []string
	for _, p := range maskedPaths {
		if !maskDir(emptyDir, p) {
			out = append(out, p)
		}
	}
	return out
}

// resources copies r and sets the device rules: deny everything, then allow
// the character devices runc creates in /dev (runc adds the same allow rules
// itself; listing them keeps the spec self-describing). With userns, also
// /dev/userfaultfd: a post-copy restore's CRIU, which runc puts in the
// container's cgroup, opens it for the restored tasks (they may not call
// userfaultfd(2) from their user namespace). The container has no such node
// and cannot make one (mknod of a device is refused in a user namespace).
func resources(r *specs.LinuxResources, userns bool) *specs.LinuxResources {
	out := &specs.LinuxResources{}
	if r != nil {
		c := *r
		out = &c
	}
	char := func(major, minor int64) specs.LinuxDeviceCgroup {
		return specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"}
	}
	out.Devices = []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"},
		char(1, 3),    // null
		char(1, 5),    // zero
		char(1, 7),    // full
		char(1, 8),    // random
		char(1, 9),    // urandom
		char(5, 0),    // tty
		char(5, 1),    // console
		char(5, 2),    // ptmx
		char(136, -1), // pts/*
	}
	if userns {
		out.Devices = append(out.Devices, char(10, 257)) // userfaultfd
	}
	return out
}

// capabilities returns systemCaps reduced to the ones in our own bounding
// set: runc fails to start a container asking for a capability it cannot
// grant (here CAP_SYS_RESOURCE is missing on the host).
func capabilities() (*specs.LinuxCapabilities, error) {
	bnd, err := boundingSet()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range systemCaps {
		if bnd&(1<<c.bit) != 0 {
			names = append(names, c.name)
		}
	}
	return &specs.LinuxCapabilities{
		Bounding:  names,
		Effective: slices.Clone(names),
		Permitted: slices.Clone(names),
	}, nil
}

// boundingSet reads CapBnd from /proc/self/status.
func boundingSet() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			var bnd uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &bnd); err != nil {
				return 0, fmt.Errorf("parse CapBnd %q: %w", v, err)
			}
			return bnd, nil
		}
	}
	return 0, fmt.Errorf("no CapBnd in /proc/self/status")
}

// Soft and hard RLIMIT_NOFILE of init (systemd's defaults), never above
// our own hard limit: without CAP_SYS_RESOURCE runc cannot raise it.
const (
	nofileSoft = 1024
	nofileHard = 524288
)

func rlimits() ([]specs.POSIXRlimit, error) {
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err != nil {
		return nil, fmt.Errorf("getrlimit: %w", err)
	}
	hard := min(uint64(nofileHard), own.Max)
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: min(nofileSoft, hard), Hard: hard},
	}, nil
}

// WriteBundle makes dir an OCI bundle: it writes spec to dir/config.json
// through a temporary file and a rename. The spec names its rootfs by
// absolute path, so the bundle needs no rootfs directory.
func WriteBundle(dir string, spec *specs.Spec) error {
	if spec == nil || spec.Root == nil || !filepath.IsAbs(spec.Root.Path) {
		return fmt.Errorf("%w: bundle spec needs an absolute root path", ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create bundle: %w", err)
	}
	return shim.WriteFileAtomic(filepath.Join(dir, "config.json"), spec)
}

// WriteCRIUConfig writes a CRIU configuration file: one option per line,
// without the leading dashes (e.g. "network-lock skip").
func WriteCRIUConfig(path string, options ...string) error {
	content := strings.Join(options, "\n")
	if content != "" {
		content += "\n"
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write criu config: %w", err)
	}
	return os.Rename(tmp, path)
}
