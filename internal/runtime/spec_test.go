package runtime

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestGenerateSpec(t *testing.T) {
	limit := int64(1000)
	s, err := GenerateSpec(SpecOptions{
		ID: "c1", Hostname: "h1", Rootfs: "/var/lib/vessel/c1",
		Args: []string{"/sbin/init"}, Env: []string{"PATH=/bin"},
		Netns:       "/run/netns/c1",
		CgroupsPath: "/vessel/c1",
		Resources:   &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}},
		ExtraMounts: []specs.Mount{{Destination: "/data", Type: "bind", Source: "/srv", Options: []string{"rbind"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != OCIVersion || s.Hostname != "h1" || s.Root.Path != "/var/lib/vessel/c1" || s.Root.Readonly {
		t.Errorf("spec header %q %q %+v", s.Version, s.Hostname, s.Root)
	}
	if s.Annotations[NameAnnotation] != "c1" {
		t.Errorf("annotations %v", s.Annotations)
	}
	p := s.Process
	if p.Cwd != "/" || p.Terminal || p.NoNewPrivileges || p.User.UID != 0 || p.User.GID != 0 {
		t.Errorf("process %+v", p)
	}
	if !slices.Equal(p.Env, []string{"PATH=/bin", "container=vessel"}) {
		t.Errorf("env %q", p.Env)
	}
	caps := p.Capabilities
	for _, forbidden := range []string{"CAP_SYS_RESOURCE", "CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_PTRACE"} {
		if slices.Contains(caps.Bounding, forbidden) {
			t.Errorf("%s granted", forbidden)
		}
	}
	for _, want := range []string{"CAP_SYS_BOOT", "CAP_NET_ADMIN", "CAP_SETUID", "CAP_KILL"} {
		if !slices.Contains(caps.Bounding, want) {
			t.Errorf("%s missing from %v", want, caps.Bounding)
		}
	}
	if !slices.Equal(caps.Bounding, caps.Effective) || !slices.Equal(caps.Bounding, caps.Permitted) ||
		len(caps.Inheritable) != 0 || len(caps.Ambient) != 0 {
		t.Errorf("capability sets differ: %+v", caps)
	}
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	if len(p.Rlimits) != 1 || p.Rlimits[0].Hard > own.Max || p.Rlimits[0].Soft > p.Rlimits[0].Hard {
		t.Errorf("rlimits %+v over our hard limit %d", p.Rlimits, own.Max)
	}

	var nsTypes []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		nsTypes = append(nsTypes, ns.Type)
		if ns.Type == specs.NetworkNamespace && ns.Path != "/run/netns/c1" {
			t.Errorf("netns path %q", ns.Path)
		}
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace, specs.UTSNamespace, specs.IPCNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
		if !slices.Contains(nsTypes, want) {
			t.Errorf("namespace %s missing", want)
		}
	}
	if slices.Contains(nsTypes, specs.UserNamespace) {
		t.Error("user namespace requested")
	}
	var dests []string
	for _, m := range s.Mounts {
		dests = append(dests, m.Destination)
	}
	if !slices.Equal(dests, []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/run", "/data"}) {
		t.Errorf("mounts %v", dests)
	}
	if s.Linux.CgroupsPath != "/vessel/c1" || *s.Linux.Resources.Pids.Limit != 1000 {
		t.Errorf("cgroups %q %+v", s.Linux.CgroupsPath, s.Linux.Resources)
	}
	if d := s.Linux.Resources.Devices; len(d) < 2 || d[0].Allow || d[0].Access != "rwm" {
		t.Errorf("device rules do not start with deny-all: %+v", d)
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	// The seccomp profile follows the capabilities: reboot needs CAP_SYS_BOOT.
	if s.Linux.Seccomp == nil || !allowsSyscall(s.Linux.Seccomp, "reboot") {
		t.Error("seccomp profile does not allow reboot")
	}
	if allowsSyscall(s.Linux.Seccomp, "init_module") {
		t.Error("seccomp profile allows init_module")
	}
}

func allowsSyscall(sc *specs.LinuxSeccomp, name string) bool {
	for _, s := range sc.Syscalls {
		if s.Action == specs.ActAllow && slices.Contains(s.Names, name) {
			return true
		}
	}
	return false
}

func TestGenerateSpecInvalid(t *testing.T) {
	for _, o := range []SpecOptions{
		{ID: "", Rootfs: "/r", Args: []string{"/init"}},
		{ID: "a/b", Rootfs: "/r", Args: []string{"/init"}},
		{ID: "c", Rootfs: "relative", Args: []string{"/init"}},
		{ID: "c", Rootfs: "/r"},
		{ID: "c", Rootfs: "/r", Args: []string{"/init"}, Cwd: "tmp"},
	} {
		if _, err := GenerateSpec(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("GenerateSpec(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

func TestWriteBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	s, err := GenerateSpec(SpecOptions{ID: "c", Rootfs: "/r", Args: []string{"/init"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(b, &back); err != nil || back.Root.Path != "/r" {
		t.Fatalf("config.json: %v %+v", err, back.Root)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("bundle holds %d files, want only config.json", len(entries))
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1", "AB=2"}, []string{"A=3", "C=4"})
	if want := []string{"PATH=/bin", "A=3", "AB=2", "C=4"}; !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
}

func TestStartFailureCode(t *testing.T) {
	for msg, want := range map[string]int{
		`exec failed: unable to start container process: exec: "/x": stat /x: no such file or directory`: 127,
		`exec failed: unable to start container process: exec: "x": executable file not found in $PATH`:  127,
		`exec failed: unable to start container process: exec: "/etc/passwd": permission denied`:         126,
		`exec failed: container does not exist`:                                                          -1,
		`exec failed: unable to start container process: error executing setns process: exit status 1`:   -1,
	} {
		code, ok := startFailureCode(msg)
		if !ok {
			code = -1
		}
		if code != want {
			t.Errorf("startFailureCode(%q) = %d, want %d", msg, code, want)
		}
	}
}

func TestRuncMessage(t *testing.T) {
	err := errors.New(`/usr/sbin/runc did not terminate successfully: exit status 1: time="2026-11-22T03:01:38Z" level=error msg="container \"x\" does not exist"` + "\n")
	if got := runcMessage(err); got != `container "x" does not exist` {
		t.Errorf("runcMessage = %q", got)
	}
	if got := runcMessage(errors.New("plain")); got != "plain" {
		t.Errorf("runcMessage = %q", got)
	}
}

func TestEmptyDirMasksDirectoriesWithBinds(t *testing.T) {
	empty := t.TempDir()
	s, err := GenerateSpec(SpecOptions{ID: "c1", Hostname: "c1", Rootfs: "/rootfs", Args: []string{"/sbin/init"}, EmptyDir: empty})
	if err != nil {
		t.Fatal(err)
	}
	// /sys/firmware exists on every Linux host; /proc/kcore is a file.
	if slices.Contains(s.Linux.MaskedPaths, "/sys/firmware") {
		t.Errorf("/sys/firmware still masked by runc: %v", s.Linux.MaskedPaths)
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") {
		t.Errorf("/proc/kcore no longer masked: %v", s.Linux.MaskedPaths)
	}
	found := false
	for _, m := range s.Mounts {
		if m.Destination == "/sys/firmware" {
			found = m.Type == "bind" && m.Source == empty && slices.Contains(m.Options, "ro")
		}
	}
	if !found {
		t.Errorf("no read-only bind mount over /sys/firmware: %+v", s.Mounts)
	}
}

// TestRestoreRequest checks the direct restore's request against what
// runc's Restore asks of CRIU for the same bundle.
func TestRestoreRequest(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	s, err := GenerateSpec(SpecOptions{
		ID: "c1", Hostname: "c1", Rootfs: "/var/lib/vessel/c1", Args: []string{"/sbin/init"},
		Netns: "/run/vessel/netns/c1", CgroupsPath: "/vessel/c1", EmptyDir: "/run/vessel/empty",
		ExtraMounts: []specs.Mount{{Destination: "/data", Type: "bind", Source: "/srv/data", Options: []string{"rbind"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(bundle, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := libcontainerConfig("c1", bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Labels, "bundle="+bundle) {
		t.Errorf("labels %q lack the bundle", cfg.Labels)
	}
	opts, err := restoreRequest(cfg, map[string]string{"memory": "/vessel/c1", "": "/vessel/c1"},
		RestoreOptions{TCPEstablished: true, LazyPages: true})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.GetRstSibling() || !opts.GetTcpEstablished() || !opts.GetLazyPages() || !opts.GetManageCgroups() {
		t.Errorf("flags %v", opts)
	}
	ext := map[string]string{}
	for _, m := range opts.GetExtMnt() {
		ext[m.GetKey()] = m.GetVal()
	}
	if ext["/data"] != "/srv/data" || ext["/dev/null"] != "/dev/null" {
		t.Errorf("external mounts %v", ext)
	}
	if len(opts.GetJoinNs()) != 0 {
		t.Errorf("joins %v: the netns is inherited, the rest are CRIU's", opts.GetJoinNs())
	}
	if in := opts.GetInheritFd(); len(in) != 1 || in[0].GetKey() != restoreNetnsKey || in[0].GetFd() != criuInheritedFd {
		t.Errorf("inherited %v", in)
	}
	if roots := opts.GetCgRoot(); len(roots) != 2 || roots[0].GetCtrl() != "" || roots[1].GetPath() != "/vessel/c1" {
		t.Errorf("cgroup roots %v", roots)
	}
}
