package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	gorunc "github.com/containerd/go-runc"
	securejoin "github.com/cyphar/filepath-securejoin"
	occgroups "github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/system"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/shim"
)

// A direct restore drives CRIU itself, as a direct dump does, instead of
// running `runc restore` in the frozen window. PrepareRestore does, while
// the container still runs elsewhere (or before a snapshot's restore),
// everything runc would do before CRIU's restore: the container's
// libcontainer configuration from the bundle (runc 1.4.3's own
// conversion, the version vessel runs), a shim that starts `criu swrk`
// with the container's stdio and network namespace, CRIU moved into the
// container's cgroups, and the restore request built. Run, in the frozen
// window, binds the (now final) root filesystem for CRIU, sends the
// request and waits for CRIU's restore; then it writes runc's state file
// exactly as `runc restore` would have (runc manages the container from
// then on: exec, kill, the next checkpoint) and hands init to the shim.

// Restorer is a prepared restore: Run restores, Abort gives up.
type Restorer interface {
	// CheckImages checks the images of an untrusted peer and shares them
	// with the container's root (Run's first step); a caller with the
	// images complete before the frozen window calls it then, and Run
	// skips it.
	CheckImages() error
	// PrepareRoot binds the root filesystem (final from here on) for
	// CRIU and reads what the request takes from the complete images:
	// Run's steps before the request, which a caller with both ready
	// before the frozen window runs then; Run skips them.
	PrepareRoot() error
	Run(ctx context.Context) (Process, error)
	Abort()
}

// PreparedRestore is a restore whose CRIU waits for its request.
type PreparedRestore struct {
	r       *Runtime
	id      string
	o       RestoreOptions
	config  *configs.Config
	cgroups map[string]string // runc's cgroup_paths
	// cgroupMgr is set when the restore made the container's cgroups.
	cgroupMgr occgroups.Manager
	shimPid   int
	// imagesChecked: CheckImages has run; rootReady: PrepareRoot has,
	// and holds the images and work directories open for the request.
	imagesChecked bool
	rootReady     bool
	imagesDir     *os.File
	workDir       *os.File
	reports       <-chan reportResult
	sk            *os.File // our end of CRIU's RPC socket
	initPipe      *os.File // init's pid goes to the shim on it
	criuPid       int
	extFds        []string // CRIU's stdio as the next dump names it
	opts          *rpc.CriuOpts
	criuRoot      string
	done          bool
	// inheritBase: the request's inherited fds before PrepareRoot
	// adds the pipes of init's stdio.
	inheritBase int
}

// restoreNetnsKey is the key under which a dump declares the container's
// network namespace external (runc's name for it).
const restoreNetnsKey = "extRootNetNS"

// PrepareRestore starts a direct restore of container id from bundle
// (config.json must exist) with images that may still be arriving: only
// Run reads them. cgroupPath is the container's cgroup (made, with its
// limits, by the caller). Abort ends it if Run is never called.
func (r *Runtime) PrepareRestore(ctx context.Context, id, bundle string, o RestoreOptions) (Restorer, error) {
	return r.prepareRestore(ctx, id, bundle, o)
}

func (r *Runtime) prepareRestore(ctx context.Context, id, bundle string, o RestoreOptions) (_ *PreparedRestore, err error) {
	if r.cfg.Criu == "" {
		return nil, fmt.Errorf("restore %s: %w", id, ErrNoCRIU)
	}
	if o.WorkPath == "" {
		o.WorkPath = o.ImagePath
	}
	if !filepath.IsAbs(o.ImagePath) || !filepath.IsAbs(o.WorkPath) {
		return nil, fmt.Errorf("%w: restore needs absolute image and work paths", ErrInvalid)
	}
	p := &PreparedRestore{r: r, id: id, o: o}
	defer func() {
		if err != nil {
			p.Abort()
		}
	}()
	if p.config, err = libcontainerConfig(id, bundle); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.WorkPath, 0o700); err != nil {
		return nil, err
	}
	mgr, err := cgmanager.New(p.config.Cgroups)
	if err != nil {
		return nil, fmt.Errorf("cgroups of %s: %w", id, err)
	}
	p.cgroups = mgr.GetPaths()
	if !mgr.Exists() {
		// Ours to remove again if the restore fails (as runc does); a
		// cgroup the caller made is the caller's.
		p.cgroupMgr = mgr
	}
	// A network namespace made beforehand (vessel's, see network) is one
	// the dump declared external: CRIU gets it as an inherited fd. Without
	// one, the shim's fd is a placeholder and CRIU restores the namespace
	// from the images.
	netns := p.config.Namespaces.PathOf(configs.NEWNET)
	if netns == "" {
		netns = os.DevNull
	}
	nsf, err := os.Open(netns)
	if err != nil {
		return nil, fmt.Errorf("network namespace of %s: %w", id, err)
	}
	defer nsf.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	p.sk = os.NewFile(uintptr(fds[0]), "criu-rpc")
	srv := os.NewFile(uintptr(fds[1]), "criu-rpc-service")
	defer srv.Close()

	c, err := r.shimConfig(id, bundle, shim.ActionRestore, o.StartOptions)
	if err != nil {
		return nil, err
	}
	c.Criu = r.cfg.Criu
	c.Restore = &shim.RestoreConfig{ImagePath: o.ImagePath, WorkPath: o.WorkPath}
	ir, iw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ir.Close()
	p.initPipe = iw
	cmd, reports, err := r.startShimFor(ctx, c, srv, nsf, ir)
	if err != nil {
		return nil, err
	}
	p.shimPid, p.reports = cmd.Process.Pid, reports
	// The shim's first word is CRIU's pid.
	select {
	case res := <-reports:
		switch {
		case res.err != nil:
			return nil, fmt.Errorf("%w %s: %w", ErrStart, id, res.err)
		case res.rep.Error != "":
			return nil, fmt.Errorf("%w %s: %s", ErrStart, id, res.rep.Error)
		}
		p.criuPid = res.rep.CriuPid
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// CRIU's restored tasks are born in its cgroups: the container's.
	if err := mgr.Apply(p.criuPid); err != nil {
		return nil, fmt.Errorf("move CRIU into the cgroups of %s: %w", id, err)
	}
	for i := range 3 {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", p.criuPid, i))
		if err != nil {
			return nil, err
		}
		p.extFds = append(p.extFds, l)
	}
	cgs, err := occgroups.ParseCgroupFile(fmt.Sprintf("/proc/%d/cgroup", p.criuPid))
	if err != nil {
		return nil, err
	}
	if p.opts, err = restoreRequest(p.config, cgs, o); err != nil {
		return nil, err
	}
	p.inheritBase = len(p.opts.InheritFd)
	if o.DirectRead && !o.LazyPages && r.DirectReadPages() {
		if err := setDirectRead(p.opts, o.WorkPath); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// libcontainerConfig is runc's configuration of the container of bundle,
// as `runc restore` (run in the bundle, as root, cgroupfs driver) makes it.
func libcontainerConfig(id, bundle string) (*configs.Config, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("bundle of %s: %w", id, err)
	}
	if spec.Root != nil && !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(bundle, spec.Root.Path)
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: &spec})
	if err != nil {
		return nil, fmt.Errorf("runc configuration of %s: %w", id, err)
	}
	// specconv names the bundle after the working directory runc runs in.
	for i, l := range cfg.Labels {
		if strings.HasPrefix(l, "bundle=") {
			cfg.Labels[i] = "bundle=" + bundle
		}
	}
	return cfg, nil
}

// request builds runc's restore request (libcontainer's Restore) for a
// vessel container: its bind mounts, masked files and devices as external
// mounts, its network namespace inherited, CRIU's cgroups (the
// container's, criuCgroups) as the roots.
func restoreRequest(cfg *configs.Config, criuCgroups map[string]string, o RestoreOptions) (*rpc.CriuOpts, error) {
	opts := &rpc.CriuOpts{
		EvasiveDevices:    proto.Bool(true),
		LogLevel:          proto.Int32(4),
		LogFile:           proto.String("restore.log"),
		RstSibling:        proto.Bool(true),
		ManageCgroups:     proto.Bool(true),
		ManageCgroupsMode: rpc.CriuCgMode_SOFT.Enum(),
		TcpEstablished:    proto.Bool(o.TCPEstablished),
		LazyPages:         proto.Bool(o.LazyPages),
	}
	if cfg.Namespaces.PathOf(configs.NEWNET) != "" {
		opts.InheritFd = append(opts.InheritFd, &rpc.InheritFd{Key: proto.String(restoreNetnsKey), Fd: proto.Int32(criuInheritedFd)})
	}
	extMount := func(key, val string) {
		opts.ExtMnt = append(opts.ExtMnt, &rpc.ExtMountMap{Key: proto.String(key), Val: proto.String(val)})
	}
	inRoot := func(dest string) string {
		d := strings.TrimPrefix(dest, cfg.Rootfs)
		if s, err := securejoin.SecureJoin(cfg.Rootfs, d); err == nil {
			d = s[len(cfg.Rootfs):]
		}
		return d
	}
	hasCgroupns := cfg.Namespaces.Contains(configs.NEWCGROUP)
	for _, m := range cfg.Mounts {
		switch m.Device {
		case "bind":
			extMount(inRoot(m.Destination), m.Source)
		case "cgroup":
			if !hasCgroupns {
				return nil, fmt.Errorf("%w: cgroup mounts without a cgroup namespace", ErrInvalid)
			}
		}
	}
	if len(cfg.MaskPaths) > 0 {
		extMount("/dev/null", "/dev/null")
	}
	for _, d := range cfg.Devices {
		extMount(inRoot(d.Path), d.Path)
	}
	for _, ns := range cfg.Namespaces {
		if ns.Path == "" || ns.Type == configs.NEWNET {
			continue
		}
		if ns.Type == configs.NEWPID || ns.Type == configs.NEWCGROUP {
			return nil, fmt.Errorf("%w: a restore cannot join the %s namespace %s", ErrInvalid, ns.Type, ns.Path)
		}
		opts.JoinNs = append(opts.JoinNs, &rpc.JoinNamespace{Ns: proto.String(configs.NsName(ns.Type)), NsFile: proto.String(ns.Path)})
	}
	for _, ctrl := range slices.Sorted(maps.Keys(criuCgroups)) {
		opts.CgRoot = append(opts.CgRoot, &rpc.CgroupRoot{Ctrl: proto.String(ctrl), Path: proto.String(criuCgroups[ctrl])})
	}
	return opts, nil
}

// CheckImages implements Restorer.
func (p *PreparedRestore) CheckImages() error {
	if p.imagesChecked {
		return nil
	}
	if m := p.o.IDMap; m != nil {
		if p.o.Untrusted {
			if err := CheckUserns(p.o.ImagePath, *m); err != nil {
				return err
			}
		}
		if err := ShareImages(p.o.ImagePath, *m); err != nil {
			return err
		}
	}
	p.imagesChecked = true
	return nil
}

// Run restores the container: the frozen window's part. The images must
// be complete and the root filesystem final. It returns once init runs
// under the shim and runc knows the container.
func (p *PreparedRestore) Run(ctx context.Context) (_ Process, err error) {
	if p.done {
		return Process{}, fmt.Errorf("restore %s: already run", p.id)
	}
	p.done = true
	defer func() {
		if err != nil {
			p.fail(ctx)
		}
	}()
	t0 := time.Now()
	lap := func(what string) { p.r.cfg.Log.Debug("restore "+what, "id", p.id, "after", time.Since(t0)) }
	if err := p.CheckImages(); err != nil {
		return Process{}, err
	}
	lap("images checked")
	defer p.releaseRoot()
	if err := p.PrepareRoot(); err != nil {
		return Process{}, err
	}

	if p.o.Hang {
		// Fault injection (tests): a CRIU that never answers.
		<-ctx.Done()
		return Process{}, fmt.Errorf("%w %s: restore stopped: %w", ErrStart, p.id, ctx.Err())
	}
	sk := p.sk
	stop := context.AfterFunc(ctx, func() { sk.SetDeadline(time.Now()) }) //nolint:errcheck // best effort
	defer stop()
	lap("request ready")
	pid, err := p.call()
	lap("criu returned")
	if err != nil {
		return Process{}, fmt.Errorf("%w %s: CRIU restore: %w", ErrStart, p.id,
			criuFailure(err, filepath.Join(p.o.WorkPath, "restore.log")))
	}
	// The tasks run from here (CRIU resumed them before it answered).
	if p.o.Resumed != nil {
		p.o.Resumed()
	}
	// The shim takes init; CRIU ends on our hang-up. The shim reports
	// once CRIU has exited, and runc's state is written meanwhile (the
	// shim never reads it): the two used to run one after the other
	// while the source waited for "resumed".
	if _, err := fmt.Fprintf(p.initPipe, "%d\n", pid); err != nil {
		unix.Kill(pid, unix.SIGKILL) //nolint:errcheck // its cgroup is the caller's to empty
		return Process{}, fmt.Errorf("%w %s: hand init to the shim: %w", ErrStart, p.id, err)
	}
	p.initPipe.Close()
	p.initPipe = nil
	p.sk.Close()
	p.sk = nil
	if err := p.writeRuncState(pid); err != nil {
		// The shim has init: it reaps it and reports (fail waits).
		unix.Kill(pid, unix.SIGKILL) //nolint:errcheck // as above
		return Process{}, err
	}
	lap("runc state written")
	select {
	case res := <-p.reports:
		switch {
		case res.err != nil:
			return Process{}, fmt.Errorf("%w %s: %w", ErrStart, p.id, res.err)
		case res.rep.Error != "":
			return Process{}, fmt.Errorf("%w %s: %s", ErrStart, p.id, res.rep.Error)
		}
	case <-ctx.Done():
		return Process{}, fmt.Errorf("%w %s: restore stopped: %w", ErrStart, p.id, ctx.Err())
	}
	lap("shim reported")
	// Ten cgroup.procs writes on a v1 host (~1 ms): beside the caller's
	// bookkeeping, not before it (a migration's source waits frozen
	// until that is done). A failure is only logged.
	go p.r.moveShim(p.id, p.shimPid)
	return Process{ShimPid: p.shimPid, InitPid: pid}, nil
}

// PrepareRoot implements Restorer. A failed one leaves nothing behind
// (Run may call it again).
func (p *PreparedRestore) PrepareRoot() (err error) {
	if p.rootReady {
		return nil
	}
	if p.done && p.reports == nil {
		return fmt.Errorf("restore %s: already ended", p.id)
	}
	defer func() {
		if err != nil {
			p.releaseRoot()
		}
	}()
	if p.imagesDir, err = os.Open(p.o.ImagePath); err != nil {
		return err
	}
	if p.workDir, err = os.Open(p.o.WorkPath); err != nil {
		return err
	}
	pipes, err := p.inheritPipes()
	if err != nil {
		return err
	}
	// CRIU wants its root to be a mount point whose parent is not
	// overmounted: the root filesystem bound at the shim's state
	// directory. A mount found there is a leftover (a daemon that died
	// with a restore's root bound, whose volume may be gone since: a
	// bind onto it fails with ENOENT): it is replaced.
	root := p.r.criuRootDir(p.id)
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unmountAll(root); err != nil {
		return fmt.Errorf("a leftover mount on CRIU's root of %s: %w", p.id, err)
	}
	p.criuRoot = root // from here releaseRoot removes it
	if err := unix.Mount(p.config.Rootfs, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the root filesystem of %s for CRIU: %w", p.id, err)
	}
	p.opts.InheritFd = append(p.opts.InheritFd[:p.inheritBase], pipes...)
	p.opts.Root = proto.String(root)
	p.opts.ImagesDirFd = proto.Int32(int32(p.imagesDir.Fd()))
	p.opts.WorkDirFd = proto.Int32(int32(p.workDir.Fd()))
	p.rootReady = true
	return nil
}

// releaseRoot undoes PrepareRoot (after the request, or a restore that
// never ran, or its own failure): CRIU's root unbound, the directories
// closed, the request without them.
func (p *PreparedRestore) releaseRoot() {
	p.unmountRoot()
	for _, f := range []**os.File{&p.imagesDir, &p.workDir} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	if p.opts != nil {
		p.opts.InheritFd = p.opts.InheritFd[:p.inheritBase]
		p.opts.Root, p.opts.ImagesDirFd, p.opts.WorkDirFd = nil, nil, nil
	}
	p.rootReady = false
}

// inheritPipes maps the pipes the dump found on init's stdio (runc's
// descriptors.json, among the images) to CRIU's, as runc does.
func (p *PreparedRestore) inheritPipes() ([]*rpc.InheritFd, error) {
	b, err := os.ReadFile(filepath.Join(p.o.ImagePath, "descriptors.json"))
	if err != nil {
		return nil, err
	}
	var fds []string
	if err := json.Unmarshal(b, &fds); err != nil {
		return nil, fmt.Errorf("descriptors.json: %w", err)
	}
	var pipes []*rpc.InheritFd
	for i, s := range fds {
		if strings.Contains(s, "pipe:") && i < 3 {
			pipes = append(pipes, &rpc.InheritFd{Key: proto.String(s), Fd: proto.Int32(int32(i))})
		}
	}
	return pipes, nil
}

// call sends the restore request and returns the restored init's pid.
func (p *PreparedRestore) call() (int, error) {
	resp, err := criuCall(p.sk, rpc.CriuReqType_RESTORE, p.opts)
	if errors.Is(err, io.EOF) {
		return 0, errors.New("CRIU ended without an answer")
	}
	if err != nil {
		return 0, err
	}
	pid := resp.GetRestore().GetPid()
	if pid <= 0 {
		return 0, errors.New("CRIU's restore answer names no pid")
	}
	return int(pid), nil
}

// writeRuncState writes the state file `runc restore` writes after CRIU's
// post-restore notification (libcontainer's currentState): the restored
// tasks are in a time namespace of CRIU's, which `runc exec` must join.
func (p *PreparedRestore) writeRuncState(pid int) error {
	cfg := p.config
	if !cfg.Namespaces.Contains(configs.NEWTIME) && configs.IsNamespaceSupported(configs.NEWTIME) {
		cfg.Namespaces = append(cfg.Namespaces, configs.Namespace{Type: configs.NEWTIME})
	}
	stat, err := system.Stat(pid)
	if err != nil {
		return fmt.Errorf("restored init of %s: %w", p.id, err)
	}
	st := libcontainer.State{
		BaseState: libcontainer.BaseState{
			ID: p.id, Config: *cfg, InitProcessPid: pid, InitProcessStartTime: stat.StartTime,
			Created: time.Now().UTC(),
		},
		CgroupPaths:         p.cgroups,
		NamespacePaths:      map[configs.NamespaceType]string{},
		ExternalDescriptors: p.extFds,
	}
	for _, ns := range cfg.Namespaces {
		st.NamespacePaths[ns.Type] = ns.GetPath(pid)
	}
	for _, t := range configs.NamespaceTypes() {
		if _, ok := st.NamespacePaths[t]; !ok && configs.IsNamespaceSupported(t) {
			st.NamespacePaths[t] = (&configs.Namespace{Type: t}).GetPath(pid)
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Join(p.r.cfg.Root, p.id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

func (p *PreparedRestore) unmountRoot() {
	if p.criuRoot == "" {
		return
	}
	if err := unmountAll(p.criuRoot); err != nil {
		p.r.cfg.Log.Warn("unmount CRIU's root", "id", p.id, "err", err)
	}
	os.Remove(p.criuRoot)
	p.criuRoot = ""
}

// criuRootDir is where a direct restore binds the root filesystem of id
// for CRIU (PrepareRoot), in the shim's state directory.
func (r *Runtime) criuRootDir(id string) string { return filepath.Join(r.dir(id), "criu-root") }

// ReleaseRestoreRoot unmounts what a direct restore of id left bound for
// CRIU and removes the mount point: the leftover of a daemon that died
// between PrepareRoot and the end of the restore (the bind holds the
// container's volume, and RemoveAll of the state directory would reach
// into it). Nothing there is not an error.
func (r *Runtime) ReleaseRestoreRoot(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	root := r.criuRootDir(id)
	for n := 0; ; n++ {
		err := unix.Unmount(root, unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount a restore's root %s: %w", root, err)
		}
		if n > 0 {
			r.cfg.Log.Warn("unmounted the root filesystem a dead daemon's restore left bound for CRIU", "id", id, "path", root)
		}
		break
	}
	if err := os.Remove(root); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// fail ends a restore that did not come to run: CRIU hung up on (it exits
// without a request, or kills what it restored on a failed one), the shim
// then reports and exits; a stuck one is killed with its process group.
func (p *PreparedRestore) fail(ctx context.Context) {
	p.releaseRoot()
	for _, f := range []**os.File{&p.sk, &p.initPipe} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	if p.reports == nil {
		return
	}
	select {
	case <-p.reports:
	case <-time.After(5 * time.Second):
		p.r.stopRestore(p.id, p.shimPid, p.reports)
	}
	p.reports = nil
	if shim.RuncHasState(p.r.cfg.Root, p.id) {
		_ = p.r.runc.Delete(context.WithoutCancel(ctx), p.id, &gorunc.DeleteOpts{Force: true})
	}
	if err := p.r.removeRuncDebris(p.id); err != nil {
		p.r.cfg.Log.Warn("clean up a failed restore", "id", p.id, "err", err)
	}
	if p.cgroupMgr != nil {
		if err := p.cgroupMgr.Destroy(); err != nil {
			p.r.cfg.Log.Warn("remove the cgroups of a failed restore", "id", p.id, "err", err)
		}
	}
}

// Abort ends a prepared restore that will not run. Idempotent; a no-op
// after Run.
func (p *PreparedRestore) Abort() {
	if p.done && p.reports == nil {
		return
	}
	p.done = true
	p.fail(context.Background())
}

// ShimPid is the pid of the restore's shim (0 before it started).
func (p *PreparedRestore) ShimPid() int { return p.shimPid }
