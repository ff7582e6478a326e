// Package daemon is vessel's core: it turns API requests into actions on the
// state store, the storage pool, the network, cgroups and the OCI runtime,
// and keeps track of running containers.
//
// Vocabulary:
//
//   - Instance: a system container: a record in the state store, a volume in
//     the storage pool, and, while running, a netns, a cgroup and a process
//     tree under a shim. The instance type (instance.go) owns all of it.
//   - Action: something done to an instance (start, snapshot, live move);
//     the transitions table (transitions.go) says from which states.
//   - Busy: the status list shows while an action works on an instance
//     ("Starting", "Migrating").
//   - Reconcile: at start, each record is checked against what the runtime
//     runs and what the pool holds, and the difference settled (reconcile.go).
//   - Journal: the record of a migration in flight (state.Migration),
//     committed with the instance's record, from which a restarted daemon
//     settles it (migrate_settle.go).
//
// Each action takes the instance's own lock (never a global one across a
// container start), so actions on different instances run in parallel.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// Daemon is a running vessel host.
type Daemon struct {
	cfg Config
	log *slog.Logger

	lockFile *os.File
	state    *state.Store
	storage  storage.Driver
	net      instanceNetwork
	rt       instanceRuntime
	vms      vmRunner   // QEMU for VM instances (vm_instance.go)
	agents   vmAgents   // the running VMs' agent sessions (vm_agent.go)
	consoles vmConsoles // the VMs whose serial console is attached (vm_console.go)
	// cgroupsFor opens a cgroup (cgroups.New); peerAPIFor connects to a
	// peer host (client.NewHTTPS): seams for the unit tests' fakes.
	cgroupsFor cgroupsFunc
	peerAPIFor peerFunc
	images     *image.Store
	ops        *operations.Registry
	cgParent   cgroups.Manager
	host       api.HostInfo

	// memLoads: instance name -> a channel closed once a pre-copy move's
	// memory is all copied in (migrate_target.go); a checkpoint waits.
	memLoads sync.Map

	// identity is this host's certificate (served over HTTPS, presented to
	// peers); fingerprint is its SHA-256.
	identity    tls.Certificate
	fingerprint string

	// control is vesseld's own cgroup (nil when it stays where it started);
	// leaveControl moves vesseld back out of it.
	control      cgroups.Manager
	leaveControl func() error

	// ctx lives as long as the daemon; background work derives from it
	// and is counted in bg, which Shutdown waits for before it closes the
	// state store.
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup
	bgMu    sync.Mutex // guards closing and bg.Add against Shutdown's bg.Wait
	closing bool

	insts      registry   // every instance, by name (instance.go)
	idmapMu    sync.Mutex // one id map allocation or peer check at a time (idmap.go)
	imageLocks keyedMutex // one per image fingerprint (unpacking)
	addrMu     sync.Mutex // address allocation + record creation
	// incoming are the live incoming migration sessions, by peer
	// (migrate_target_limits.go).
	incoming incomingSessions
	// pageLinks are post-copy page links waiting for their move
	// (migrate_pages.go).
	pageLinks pageLinks
}

// New prepares a daemon: it takes the root's lock, opens the state store,
// mounts the storage pool, sets up the bridge and cgroup parent, makes sure
// the built-in image exists, reconciles the instances' records with what
// runs and settles migrations a previous daemon left in flight.
func New(ctx context.Context, cfg Config, log *slog.Logger) (_ *Daemon, err error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:        cfg,
		log:        log,
		ops:        operations.NewRegistry(),
		cgroupsFor: cgroups.New,
	}
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			if lerr := d.leaveControlCgroup(); lerr != nil {
				log.Warn("leave control cgroup", "err", lerr)
			}
			d.close()
		}
	}()
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.RunDir, err)
	}
	if err := makePrivateDirs(cfg.privateDirs()); err != nil {
		return nil, err
	}
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	if err := cfg.mountMigrationTmpfs(); err != nil {
		return nil, err
	}
	if err := cfg.mountVMRAMTmpfs(); err != nil {
		return nil, err
	}
	if d.state, err = state.Open(cfg.dbPath()); err != nil {
		return nil, err
	}
	if err := d.loadIdentity(); err != nil {
		return nil, err
	}
	d.peerAPIFor = func(p state.Peer) peerAPI { return client.NewHTTPS(p.Addresses[0], p.Fingerprint, d.identity) }
	if d.images, err = image.NewStore(cfg.imagesDir(), cfg.ImageMaxSize); err != nil {
		return nil, err
	}
	if err := d.openStorage(ctx); err != nil {
		return nil, err
	}
	netm, err := network.New(cfg.networkConfig())
	if err != nil {
		return nil, err
	}
	d.net = netm
	if err := d.net.Setup(ctx); err != nil {
		return nil, fmt.Errorf("network setup: %w", err)
	}
	if d.cgParent, err = cgroups.New(cfg.CgroupParent); err != nil {
		return nil, err
	}
	if err := d.cgParent.Create(); err != nil {
		return nil, err
	}
	if err := cgroups.CheckNoInternalProcesses(cfg.CgroupParent); err != nil {
		return nil, err
	}
	if cfg.FavorDynMods {
		d.favorDynMods()
	}
	if err := d.setupCRIUConfig(); err != nil {
		return nil, err
	}
	if err := d.enterControlCgroup(); err != nil {
		return nil, fmt.Errorf("control cgroup: %w", err)
	}
	rt, err := runtime.New(runtime.Config{
		Runc: cfg.Runc, Criu: cfg.Criu, Shim: cfg.Shim,
		Root: cfg.runcRoot(), StateDir: cfg.shimDir(),
		ShimCgroup: cfg.shimsCgroupPath(), Log: log,
	})
	if err != nil {
		return nil, err
	}
	d.rt = rt
	d.vms = newQEMURunner(cfg)
	if a := d.vms.Accel(); a.Accel != qemu.AccelKVM {
		log.Warn("VMs run under TCG (software emulation, many times slower than KVM)", "reason", a.Reason)
	}
	d.host = d.probeHost(ctx)
	if err := d.ensureBuiltinImage(ctx); err != nil {
		return nil, err
	}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// start brings the instances back: it loads their records, reconciles
// each with the runtime and the storage pool, and settles the migrations
// a previous daemon left in flight (before the API serves: each is locked
// at once).
func (d *Daemon) start(ctx context.Context) error {
	if err := d.importJournalFiles(); err != nil {
		return err
	}
	if err := d.load(); err != nil {
		return err
	}
	d.reconcile(ctx)
	return d.recoverMigrations()
}

// load fills the registry from the state store.
func (d *Daemon) load() error {
	recs, err := d.state.ListInstances()
	if err != nil {
		return err
	}
	for _, rec := range recs {
		d.insts.add(newInstance(rec))
	}
	return nil
}

// enterBackground counts background work (an exit's cleanup, a settle)
// that Shutdown must wait for before it closes the state store; once
// Shutdown has begun it refuses, and the work is left to the next start.
// A true result must be matched by d.bg.Done().
func (d *Daemon) enterBackground() bool {
	d.bgMu.Lock()
	defer d.bgMu.Unlock()
	if d.closing {
		return false
	}
	d.bg.Add(1)
	return true
}

// takeLock makes sure only one daemon uses a root directory.
func (d *Daemon) takeLock() error {
	f, err := os.OpenFile(d.cfg.lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return errorf(ErrConflict, "another vesseld is using %s", d.cfg.Root)
	}
	d.lockFile = f
	return nil
}

func (d *Daemon) openStorage(ctx context.Context) error {
	mk := func(driver string) (storage.Driver, error) {
		drv, err := storage.New(storage.Config{
			Driver: driver, Root: d.cfg.poolRoot(), Source: d.cfg.StorageSource,
			Device: d.cfg.StorageDevice, LoopFile: d.cfg.poolFile(), Size: d.cfg.StorageSize,
		})
		if err != nil {
			return nil, err
		}
		return drv, drv.Mount(ctx)
	}
	drv, err := mk(d.cfg.StorageDriver)
	if errors.Is(err, storage.ErrNotSupported) && d.cfg.StorageDriver == "btrfs" &&
		d.cfg.StorageSource == "" && d.cfg.StorageDevice == "" {
		d.log.Warn("btrfs unavailable, falling back to the dir storage driver", "err", err)
		drv, err = mk("dir")
	}
	if err != nil {
		return fmt.Errorf("storage pool: %w", err)
	}
	d.storage = drv
	return nil
}

// Config returns the daemon's effective configuration.
func (d *Daemon) Config() Config { return d.cfg }

// Shutdown stops background work and closes the daemon. Running containers
// keep running (their shims are independent processes). It cancels the
// operations and waits for them and for background work (a settling
// migration stops retrying; its journal stays for the next start) before
// it closes the state store. When nothing runs, it also releases the host
// resources it holds: the pool is unmounted (its loop device detached),
// the bridge and NAT rules removed, the cgroup parent deleted; the next
// start sets them up again.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.bgMu.Lock()
	d.closing = true
	d.bgMu.Unlock()
	d.cancel()
	d.ops.CancelAll()
	d.bg.Wait()
	n := d.insts.countRunning()
	var errs []error
	if err := d.leaveControlCgroup(); err != nil {
		errs = append(errs, err)
	}
	if n == 0 && d.storage != nil {
		if err := d.releaseHost(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	d.close()
	return errors.Join(errs...)
}

// systemdUnitCgroup reports whether a cgroup path names a systemd unit's
// cgroup (a .service, .scope or .slice).
func systemdUnitCgroup(path string) bool {
	switch filepath.Ext(path) {
	case ".service", ".scope", ".slice":
		return true
	}
	return false
}

// releaseHost undoes New's host setup; only when no container runs.
func (d *Daemon) releaseHost(ctx context.Context) error {
	var errs []error
	d.resetLoopSchedulers(ctx)
	if err := d.storage.Unmount(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := d.net.Teardown(ctx); err != nil {
		errs = append(errs, err)
	}
	// A systemd unit's cgroup (vessel-instances.service) is systemd's to
	// remove; vesseld only empties it.
	if !systemdUnitCgroup(d.cfg.CgroupParent) {
		if err := d.cgParent.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.cfg.unmountMigrationTmpfs(); err != nil {
		errs = append(errs, err)
	}
	if err := d.cfg.unmountVMRAMTmpfs(); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{d.cfg.shimDir(), d.cfg.runcRoot(), d.cfg.emptyDir(), filepath.Join(d.cfg.RunDir, "criu.conf"),
		filepath.Join(d.cfg.RunDir, "criu"), filepath.Join(d.cfg.RunDir, "migrate"), filepath.Join(d.cfg.RunDir, "vm"), d.cfg.vmRAMRoot()} {
		_ = os.Remove(dir)
	}
	_ = os.Remove(d.cfg.RunDir)
	return errors.Join(errs...)
}

func (d *Daemon) close() {
	if d.state != nil {
		d.state.Close()
	}
	if d.lockFile != nil {
		d.lockFile.Close()
	}
}

// Operations returns the operation registry.
func (d *Daemon) Operations() *operations.Registry { return d.ops }

func instanceResources(name string) map[string][]string {
	return map[string][]string{"instances": {"/" + api.Version + "/instances/" + name}}
}

// makePrivateDirs creates dirs, or gives existing ones (an older version
// made them 0711), mode 0700: the state tree holds the containers' root
// filesystems, their bundles and logs, none of which another host user
// may reach (a setuid file a container's root made must be out of reach).
func makePrivateDirs(dirs []string) error {
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", dir, err)
		}
	}
	return nil
}
