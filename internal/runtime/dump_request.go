package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	criu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	securejoin "github.com/cyphar/filepath-securejoin"
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
// ~10 ms on a small VM. PrepareCheckpoint does all of that, and starts the
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
// (another runc version): Checkpoint falls back to `runc checkpoint`.
var errNoDirectDump = errors.New("no direct CRIU dump")

// PreparedCheckpoint is a CRIU service process with its dump request
// ready: Run sends the request, Close releases what Run did not.
type PreparedCheckpoint struct {
	id       string
	work     string
	c        *criu.Criu
	opts     *rpc.CriuOpts
	images   *os.File
	workDir  *os.File
	fallback func() error // runc checkpoint, when a direct dump is not possible
}

// PrepareCheckpoint gets a checkpoint of a running container ready, so
// that Run only dumps. The container may still run; freeze it (or not)
// between the two calls.
func (r *Runtime) PrepareCheckpoint(id string, o CheckpointOptions) (*PreparedCheckpoint, error) {
	if err := r.checkCheckpoint(id, &o); err != nil {
		return nil, err
	}
	pc := &PreparedCheckpoint{id: id, work: o.WorkPath}
	opts, err := r.dumpRequest(id, o)
	if errors.Is(err, errNoDirectDump) {
		r.cfg.Log.Debug("runc checkpoint instead of a direct dump", "id", id, "err", err)
		pc.fallback = func() error { return r.runcCheckpoint(id, o) }
		return pc, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if pc.images, err = os.Open(o.ImagePath); err == nil {
		pc.workDir, err = os.Open(o.WorkPath)
	}
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	// CRIU opens them as /proc/<our pid>/fd/N.
	opts.ImagesDirFd = proto.Int32(int32(pc.images.Fd()))
	opts.WorkDirFd = proto.Int32(int32(pc.workDir.Fd()))
	if o.StatusFile != nil {
		opts.StatusFd = proto.Int32(int32(o.StatusFile.Fd()))
	}
	pc.opts = opts
	pc.c = criu.MakeCriu()
	pc.c.SetCriuPath(r.cfg.Criu)
	if err := pc.c.Prepare(); err != nil {
		pc.c = nil
		pc.Close()
		return nil, fmt.Errorf("checkpoint %s: start criu: %w", id, err)
	}
	return pc, nil
}

// Run dumps the container. It can run once.
func (pc *PreparedCheckpoint) Run() error {
	if pc.fallback != nil {
		return pc.fallback()
	}
	if pc.c == nil {
		return fmt.Errorf("checkpoint %s: already run", pc.id)
	}
	err := pc.c.Dump(pc.opts, nil)
	if cerr := pc.c.Cleanup(); err == nil && cerr != nil {
		err = cerr
	}
	pc.c = nil
	if err != nil {
		return fmt.Errorf("%w %s: criu dump: %w%s", ErrCheckpoint, pc.id, err, criuLogErrors(filepath.Join(pc.work, "dump.log")))
	}
	return nil
}

// Close stops a CRIU service that never dumped and closes the directories.
func (pc *PreparedCheckpoint) Close() {
	if pc.c != nil {
		_ = pc.c.Cleanup() // closing its socket ends the service
		pc.c = nil
	}
	for _, f := range []*os.File{pc.images, pc.workDir} {
		if f != nil {
			f.Close()
		}
	}
}

// dumpRequest builds runc's dump request for container id from its state
// file, and writes descriptors.json next to the images for runc restore.
func (r *Runtime) dumpRequest(id string, o CheckpointOptions) (*rpc.CriuOpts, error) {
	if !o.LeaveRunning {
		return nil, fmt.Errorf("%w: runc removes a container it dumps without leave-running", errNoDirectDump)
	}
	b, err := os.ReadFile(filepath.Join(r.cfg.Root, id, "state.json"))
	if err != nil {
		return nil, err
	}
	var st runcState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: runc state: %w", errNoDirectDump, err)
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
		LazyPages:      proto.Bool(o.LazyPages),
	}
	if fcg := st.CgroupPaths["freezer"]; fcg != "" {
		opts.FreezeCgroup = proto.String(fcg)
	} else if fcg := st.CgroupPaths[""]; fcg != "" {
		opts.FreezeCgroup = proto.String(fcg) // cgroup v2
	}
	if o.PageServer != "" {
		host, port, err := net.SplitHostPort(o.PageServer)
		if err != nil {
			return nil, fmt.Errorf("page server %q: %w", o.PageServer, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("page server %q: %w", o.PageServer, err)
		}
		opts.Ps = &rpc.CriuPageServerInfo{Address: proto.String(host), Port: proto.Int32(int32(p))}
	}
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
				return nil, fmt.Errorf("namespace %s: %w", ns.Path, err)
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
				return nil, fmt.Errorf("%w: cgroup mounts without a cgroup namespace", errNoDirectDump)
			}
		}
	}
	for _, p := range cfg.MaskPaths {
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/root/%s", st.InitProcessPid, p))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if !fi.IsDir() {
			extMount(p, "/dev/null") // a masked file is /dev/null bound over it
		}
	}
	for _, dev := range cfg.Devices {
		d := inRoot(dev.Path)
		extMount(d, d)
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
