package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	securejoin "github.com/cyphar/filepath-securejoin"
	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// A direct dump talks to CRIU itself (criu swrk, over go-criu's RPC)
// instead of running `runc checkpoint`. It builds the same request runc
// 1.1 builds (libcontainer's Checkpoint: the container's root, its bind
// mounts, masked files and device nodes as external mounts, its network
// namespace as external, its freezer cgroup) from runc's state file, and
// writes runc's descriptors.json, so `runc restore` takes its images as
// its own.
//
// What it saves is the time runc spends before CRIU starts (a Go binary's
// start, loading its state, asking CRIU its version with another exec):
// ~10 ms on a small VM. NewCheckpoint does all of that, and starts the
// CRIU service, before the caller freezes the container; only CRIU's dump
// is left for the frozen window.

// runcState is the part of runc's state.json (libcontainer.State, runc
// 1.1) a dump needs.
type runcState struct {
	InitProcessPid int `json:"init_process_pid"`
	Config         struct {
		Rootfs string `json:"rootfs"`
		Mounts []struct {
			Source      string `json:"source"`
			Destination string `json:"destination"`
			Device      string `json:"device"`
		} `json:"mounts"`
		MaskPaths []string `json:"mask_paths"`
		Devices   []struct {
			Path string `json:"path"`
		} `json:"devices"`
		Namespaces []struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"namespaces"`
	} `json:"config"`
	CgroupPaths         map[string]string `json:"cgroup_paths"`
	ExternalDescriptors []string          `json:"external_descriptors"`
}

// errNoDirectDump says runc's state is not what a direct dump expects
// (another runc version), or the dump is one only runc can do: the
// checkpoint falls back to `runc checkpoint`.
var errNoDirectDump = errors.New("no direct CRIU dump")

// readRuncState reads runc's state file of container id. A file that is
// not runc 1.1's state is errNoDirectDump.
func (r *Runtime) readRuncState(id string) (*runcState, error) {
	b, err := os.ReadFile(filepath.Join(r.cfg.Root, id, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no runc state", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var st runcState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: runc state: %w", errNoDirectDump, err)
	}
	return &st, nil
}

// freezer is the container's cgroup directory CRIU freezes: the freezer
// hierarchy's on cgroup v1, the one directory on v2.
func (st *runcState) freezer() string {
	if fcg := st.CgroupPaths["freezer"]; fcg != "" {
		return fcg
	}
	return st.CgroupPaths[""]
}

// pids lists the processes in the container's cgroup.
func (st *runcState) pids() ([]int, error) {
	dir := st.freezer()
	if dir == "" {
		return nil, fmt.Errorf("%w: runc state names no freezer cgroup", errNoDirectDump)
	}
	return occgroups.GetAllPids(dir)
}

// lazyOpts are a lazy dump's CRIU config file (it names the page server's
// inherited socket) and the pipe CRIU reports its readiness on.
type lazyOpts struct {
	config string   // CRIU config file with "ps-socket N"
	status *os.File // CRIU writes '\0' once the page server is up
}

// dumpRequest builds runc's dump request from runc's state, and writes
// descriptors.json next to the images for runc restore. A dump runc must
// do itself is errNoDirectDump.
func dumpRequest(st *runcState, o CheckpointOptions, lazy *lazyOpts) (*rpc.CriuOpts, error) {
	if !o.LeaveRunning {
		return nil, fmt.Errorf("%w: runc removes a container it dumps without leave-running", errNoDirectDump)
	}
	cfg := st.Config
	if st.InitProcessPid <= 0 || cfg.Rootfs == "" || st.CgroupPaths == nil {
		return nil, fmt.Errorf("%w: runc state without a pid, root or cgroups", errNoDirectDump)
	}
	opts := &rpc.CriuOpts{
		LogLevel: proto.Int32(4),
		LogFile:  proto.String("dump.log"),
		Root:     proto.String(cfg.Rootfs),
		// Not "ignore": the images would then name the source's cgroup
		// paths as the cgroup namespace's root.
		ManageCgroups:  proto.Bool(true),
		Pid:            proto.Int32(int32(st.InitProcessPid)),
		LeaveRunning:   proto.Bool(o.LeaveRunning),
		TcpEstablished: proto.Bool(o.TCPEstablished),
	}
	if fcg := st.freezer(); fcg != "" {
		opts.FreezeCgroup = proto.String(fcg)
	}
	if lazy != nil {
		setLazy(opts, lazy)
	}
	if err := addExternals(opts, st); err != nil {
		return nil, err
	}
	fds, err := json.Marshal(st.ExternalDescriptors)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.ImagePath, "descriptors.json"), fds, 0o600); err != nil {
		return nil, err
	}
	return opts, nil
}

// setLazy makes opts a lazy dump: memory is left to a page server on the
// socket the config file names.
func setLazy(opts *rpc.CriuOpts, lazy *lazyOpts) {
	opts.LazyPages = proto.Bool(true)
	if lazy.status != nil {
		// CRIU opens it as /proc/<our pid>/fd/N.
		opts.StatusFd = proto.Int32(int32(lazy.status.Fd()))
	}
	// An RPC request cannot give a lazy dump's page server a socket (CRIU
	// takes ps.fd for a restore only); its config file can.
	opts.ConfigFile = proto.String(lazy.config)
}

// addExternals declares what the container gets from outside its images,
// as runc does: namespaces it joined, bind mounts, masked files, devices.
func addExternals(opts *rpc.CriuOpts, st *runcState) error {
	cfg := st.Config
	hasCgroupns := false
	for _, ns := range cfg.Namespaces {
		switch {
		case ns.Type == "NEWCGROUP":
			hasCgroupns = true
		case (ns.Type == "NEWNET" || ns.Type == "NEWPID") && ns.Path != "":
			// An external namespace: restore gets it back as an inherited
			// fd under this key (runc's naming).
			var s syscall.Stat_t
			if err := syscall.Stat(ns.Path, &s); err != nil {
				return fmt.Errorf("namespace %s: %w", ns.Path, err)
			}
			kind, key := "net", "extRootNetNS"
			if ns.Type == "NEWPID" {
				kind, key = "pid", "extRootPidNS"
			}
			opts.External = append(opts.External, fmt.Sprintf("%s[%d]:%s", kind, s.Ino, key))
		}
	}
	extMount := func(dest, val string) {
		opts.ExtMnt = append(opts.ExtMnt, &rpc.ExtMountMap{Key: proto.String(dest), Val: proto.String(val)})
	}
	inRoot := func(dest string) string {
		d := strings.TrimPrefix(dest, cfg.Rootfs)
		if p, err := securejoin.SecureJoin(cfg.Rootfs, d); err == nil {
			d = p[len(cfg.Rootfs):]
		}
		return d
	}
	for _, m := range cfg.Mounts {
		switch m.Device {
		case "bind":
			d := inRoot(m.Destination)
			extMount(d, d)
		case "cgroup":
			if !hasCgroupns {
				// runc bind-mounts the host's hierarchies then; a dump
				// would need each of them as external.
				return fmt.Errorf("%w: cgroup mounts without a cgroup namespace", errNoDirectDump)
			}
		}
	}
	for _, p := range cfg.MaskPaths {
		isDir, err := isDirInRoot(st.InitProcessPid, p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if !isDir {
			extMount(p, "/dev/null") // a masked file is /dev/null bound over it
		}
	}
	for _, dev := range cfg.Devices {
		d := inRoot(dev.Path)
		extMount(d, d)
	}
	return nil
}

// isDirInRoot reports whether p is a directory as the container whose
// init is pid sees it: looked up in its root with RESOLVE_IN_ROOT, so a
// symlink the container planted resolves inside it, never on the host.
func isDirInRoot(pid int, p string) (bool, error) {
	root, err := os.Open(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return false, err
	}
	defer root.Close()
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(int(root.Fd()), p, &how)
	if err != nil {
		return false, &os.PathError{Op: "openat2", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
