// Package daemon is vessel's core: it turns API requests into actions on the
// state store, the storage pool, the network, cgroups and the OCI runtime,
// and keeps track of running containers.
//
// Vocabulary:
//
//   - Instance: a system container: a record in the state store, a volume in
//     the storage pool, and, while running, a netns, a cgroup and a process
//     tree under a shim.
//   - Live: the in-memory view of running instances (shim and init pids, an
//     exit channel). It is rebuilt from the shims' state at start
//     (reattach), so a daemon restart loses nothing.
//   - Busy: the transient status of an instance an action is working on
//     ("Starting", "Stopping"), shown by list.
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
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
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
	net      *network.Manager
	rt       *runtime.Runtime
	images   *image.Store
	ops      *operations.Registry
	cgParent cgroups.Manager
	host     api.HostInfo

	// identity is this host's certificate (served over HTTPS, presented to
	// peers); fingerprint is its SHA-256.
	identity    tls.Certificate
	fingerprint string

	// control is vesseld's own cgroup (nil when it stays where it started);
	// leaveControl moves vesseld back out of it.
	control      cgroups.Manager
	leaveControl func() error

	// ctx lives as long as the daemon; background work derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	instLocks  keyedMutex // one per instance name
	imageLocks keyedMutex // one per image fingerprint (unpacking)
	addrMu     sync.Mutex // address allocation + record creation

	mu   sync.Mutex
	live map[string]*running
	busy map[string]string
}

// New prepares a daemon: it takes the root's lock, opens the state store,
// mounts the storage pool, sets up the bridge and cgroup parent, makes sure
// the built-in image exists and reattaches running containers.
func New(ctx context.Context, cfg Config, log *slog.Logger) (_ *Daemon, err error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:  cfg,
		log:  log,
		ops:  operations.NewRegistry(),
		live: map[string]*running{},
		busy: map[string]string{},
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
	for _, dir := range []string{cfg.Root, cfg.RunDir, cfg.imagesDir(), filepath.Dir(cfg.poolFile())} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	if d.state, err = state.Open(cfg.dbPath()); err != nil {
		return nil, err
	}
	if err := d.loadIdentity(); err != nil {
		return nil, err
	}
	if d.images, err = image.NewStore(cfg.imagesDir()); err != nil {
		return nil, err
	}
	if err := d.openStorage(ctx); err != nil {
		return nil, err
	}
	if d.net, err = network.New(cfg.networkConfig()); err != nil {
		return nil, err
	}
	if err := d.net.Setup(ctx); err != nil {
		return nil, fmt.Errorf("network setup: %w", err)
	}
	if d.cgParent, err = cgroups.New(cfg.CgroupParent); err != nil {
		return nil, err
	}
	if err := d.cgParent.Create(); err != nil {
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
	if d.rt, err = runtime.New(runtime.Config{
		Runc: cfg.Runc, Criu: cfg.Criu, Shim: cfg.Shim,
		Root: cfg.runcRoot(), StateDir: cfg.shimDir(),
		ShimCgroup: cfg.shimsCgroupPath(), Log: log,
	}); err != nil {
		return nil, err
	}
	d.host = d.probeHost(ctx)
	if err := d.ensureBuiltinImage(ctx); err != nil {
		return nil, err
	}
	if err := d.reattach(ctx); err != nil {
		return nil, err
	}
	d.recoverMigrations()
	return d, nil
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
			LoopFile: d.cfg.poolFile(), Size: d.cfg.StorageSize,
		})
		if err != nil {
			return nil, err
		}
		return drv, drv.Mount(ctx)
	}
	drv, err := mk(d.cfg.StorageDriver)
	if errors.Is(err, storage.ErrNotSupported) && d.cfg.StorageDriver == "btrfs" && d.cfg.StorageSource == "" {
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
// keep running (their shims are independent processes). When nothing runs,
// it also releases the host resources it holds: the pool is unmounted (its
// loop device detached), the bridge and NAT rules removed, the cgroup parent
// deleted; the next start sets them up again.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.cancel()
	d.ops.CancelAll()
	d.mu.Lock()
	n := len(d.live)
	d.mu.Unlock()
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
	if err := d.cgParent.Destroy(); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{d.cfg.shimDir(), d.cfg.runcRoot(), d.cfg.emptyDir(), filepath.Join(d.cfg.RunDir, "criu.conf"),
		filepath.Join(d.cfg.RunDir, "criu"), filepath.Join(d.cfg.RunDir, "migrate")} {
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

// setBusy marks an instance as being worked on; the returned func clears it.
func (d *Daemon) setBusy(name, status string) func() {
	d.mu.Lock()
	d.busy[name] = status
	d.mu.Unlock()
	return func() { d.clearBusy(name) }
}

// clearBusy ends an instance's busy status.
func (d *Daemon) clearBusy(name string) {
	d.mu.Lock()
	delete(d.busy, name)
	d.mu.Unlock()
}

// lockInstance takes an instance's lock for an action.
func (d *Daemon) lockInstance(ctx context.Context, name string) (func(), error) {
	unlock, err := d.instLocks.Lock(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("instance %q is busy: %w", name, err)
	}
	return unlock, nil
}

// Operations returns the operation registry.
func (d *Daemon) Operations() *operations.Registry { return d.ops }

func instanceResources(name string) map[string][]string {
	return map[string][]string{"instances": {"/" + api.Version + "/instances/" + name}}
}
