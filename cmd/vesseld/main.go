// Command vesseld is the vessel daemon: it runs system containers and
// serves the REST API on a unix socket.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/daemon"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/server"
)

// version is set by the build (make build: -X main.version=...).
var version = "dev"

func main() {
	// vesseld is also the launcher of the QEMU a stateful restore starts
	// with transparent huge pages off (internal/qemu/thp.go).
	if qemu.IsNoTHPLaunch(os.Args) {
		fmt.Fprintln(os.Stderr, "vesseld:", qemu.ExecNoTHP(os.Args))
		os.Exit(1)
	}
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vesseld:", err)
		os.Exit(1)
	}
}

// env returns an environment variable's value or def.
func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// envUint returns an environment variable's value as a number, or def.
func envUint(key string, def uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv(key), 10, 64); err == nil {
		return v
	}
	return def
}

// envDuration returns an environment variable's value as a duration
// ("30ms"), or def.
func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// envBool returns an environment variable's value as a boolean, or def.
func envBool(key string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

func newRootCmd() *cobra.Command {
	cfg := daemon.DefaultConfig()
	var subnet, ipPool, logLevel string
	var faults, defaultLimits []string
	var storageSize, imageMaxSize int64
	cmd := &cobra.Command{
		Use:   "vesseld",
		Short: "The vessel daemon: system containers behind a REST API",
		Long: `vesseld runs system containers and serves vessel's REST API on a unix socket.

Several daemons can run side by side when each has its own --root, --run-dir,
--socket, --bridge, --subnet and --cgroup-parent (tests and test hosts do).
Every flag can also be set with an environment variable VESSEL_<FLAG>
(e.g. VESSEL_ROOT).`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("bad --log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return fmt.Errorf("bad --subnet: %w", err)
			}
			cfg.Subnet = p.Masked()
			if ipPool != "" {
				pool, err := netip.ParsePrefix(ipPool)
				if err != nil {
					return fmt.Errorf("bad --ip-pool: %w", err)
				}
				cfg.IPPool = pool.Masked()
			}
			cfg.StorageSize = storageSize << 20
			cfg.ImageMaxSize = imageMaxSize << 20
			if cfg.DefaultLimits, err = parseKeyValues(defaultLimits); err != nil {
				return fmt.Errorf("bad --default-limit: %w", err)
			}
			if cfg.Faults, err = daemon.ParseFaults(faults); err != nil {
				return err
			}
			if cfg.Socket == "" {
				cfg.Socket = daemon.DefaultSocket(cfg.Root)
			}
			return run(cmd.Context(), cfg, log)
		},
	}
	cmd.AddCommand(newHoldCmd())
	f := cmd.Flags()
	f.StringVar(&cfg.Root, "root", env("VESSEL_ROOT", cfg.Root), "state directory")
	f.StringVar(&cfg.RunDir, "run-dir", env("VESSEL_RUN_DIR", cfg.RunDir), "runtime state directory")
	f.StringVar(&cfg.Socket, "socket", env("VESSEL_SOCKET", ""), "API unix socket (default ROOT/unix.socket)")
	f.StringVar(&cfg.Name, "name", env("VESSEL_NAME", cfg.Name), "this host's name")
	f.StringVar(&cfg.StorageDriver, "storage-driver", env("VESSEL_STORAGE_DRIVER", cfg.StorageDriver), "storage driver: btrfs or dir")
	f.StringVar(&cfg.StorageSource, "storage-source", env("VESSEL_STORAGE_SOURCE", ""), "existing btrfs directory to use instead of a loop-backed pool file")
	f.StringVar(&cfg.StorageDevice, "storage-device", env("VESSEL_STORAGE_DEVICE", ""), "block device with a btrfs filesystem to mount as the pool instead of a loop-backed pool file")
	f.DurationVar(&cfg.StorageDeviceIdle, "storage-device-idle", envDuration("VESSEL_STORAGE_DEVICE_IDLE", 0), "BFQ's slice_idle on --storage-device for disk weights on cgroup v2 (0: BFQ's own, 8ms; longer where readers' next requests come late, e.g. an emulated CPU)")
	f.Int64Var(&storageSize, "storage-size", int64(envUint("VESSEL_STORAGE_SIZE", uint64(cfg.StorageSize>>20))), "size of a new loop-backed pool file, MiB")
	f.Int64Var(&imageMaxSize, "image-max-size", int64(envUint("VESSEL_IMAGE_MAX_SIZE", image.DefaultMaxSize>>20)), "largest image accepted, once decompressed, MiB (an import beyond it fails with 413)")
	f.StringVar(&cfg.Bridge, "bridge", env("VESSEL_BRIDGE", cfg.Bridge), "host bridge for containers")
	f.StringVar(&subnet, "subnet", env("VESSEL_SUBNET", cfg.Subnet.String()), "containers' IPv4 subnet")
	f.BoolVar(&cfg.NAT, "nat", cfg.NAT, "masquerade containers' outbound traffic")
	f.StringVar(&ipPool, "ip-pool", env("VESSEL_IP_POOL", ""), "part of the subnet to allocate new addresses from (hosts sharing a segment)")
	f.StringVar(&cfg.Uplink, "uplink", env("VESSEL_UPLINK", ""), "interface to enslave to the bridge (L2 link to other hosts)")
	f.BoolVar(&cfg.ExternalGateway, "external-gateway", false, "the subnet's gateway is a router on the uplink, not this host (implies --nat=false)")
	f.StringSliceVar(&cfg.Listen, "listen", splitEnv("VESSEL_LISTEN"), "HTTPS address for remote clients and peers (host:port, repeatable)")
	f.StringSliceVar(&cfg.Advertise, "advertise", splitEnv("VESSEL_ADVERTISE"), "addresses written into join tokens (default: the --listen addresses)")
	f.IntVar(&cfg.MaxConnections, "max-connections", int(envUint("VESSEL_MAX_CONNECTIONS", uint64(cfg.MaxConnections))), "API connections served at once on each listener; more wait until one closes (0: no cap)")
	f.DurationVar(&cfg.HTTPReadTimeout, "http-read-timeout", cfg.HTTPReadTimeout, "longest a client may take to send one API request, body included (streams, uploads and waits of trusted callers are exempt)")
	f.StringVar(&cfg.CgroupParent, "cgroup-parent", env("VESSEL_CGROUP_PARENT", cfg.CgroupParent), "parent cgroup of the containers")
	f.StringVar(&cfg.ControlCgroup, "control-cgroup", env("VESSEL_CONTROL_CGROUP", ""), `vesseld's own cgroup (default CGROUP_PARENT-control; "none": stay where started, e.g. in a systemd slice)`)
	f.Uint64Var(&cfg.ControlCPUWeight, "control-cpu-weight", envUint("VESSEL_CONTROL_CPU_WEIGHT", cfg.ControlCPUWeight), "CPU weight of the control cgroup, 1..10000 against the containers' 100 (0: off, the same 100)")
	f.BoolVar(&cfg.FavorDynMods, "cgroup-favordynmods", envBool("VESSEL_CGROUP_FAVORDYNMODS", cfg.FavorDynMods), "turn on the host's cgroup2 favordynmods option: task moves between cgroups (start, exec, restore) skip an RCU grace period, fork and exit cost a little more")
	f.StringVar(&cfg.Runc, "runc", env("VESSEL_RUNC", ""), "runc binary (default: /usr/lib/vessel/runc, /usr/local/lib/vessel/runc, then PATH)")
	f.StringVar(&cfg.Criu, "criu", env("VESSEL_CRIU", ""), "criu binary (default: /usr/lib/vessel/criu, then PATH)")
	f.StringVar(&cfg.Subuid, "subuid", env("VESSEL_SUBUID", ""), "subordinate uid file unprivileged containers take root's ids from (default /etc/subuid)")
	f.StringVar(&cfg.Subgid, "subgid", env("VESSEL_SUBGID", ""), "subordinate gid file (default /etc/subgid)")
	f.BoolVar(&cfg.AcceptPrivileged, "accept-privileged", false, "let peers move privileged containers (security.privileged=true) in: each is root on this host")
	f.StringVar(&cfg.Shim, "shim", env("VESSEL_SHIM", ""), "vessel-shim binary (default: next to vesseld, /usr/lib/vessel/vessel-shim, then PATH)")
	f.StringVar(&cfg.VMAgent, "vm-agent", env("VESSEL_VM_AGENT", ""), "guest agent put in VMs' initramfs as /init (default: vessel-agent next to vesseld, /usr/lib/vessel/vessel-agent, then PATH)")
	f.StringVar(&cfg.VMKernelDir, "vm-kernel-dir", env("VESSEL_VM_KERNEL_DIR", ""), "guest kernel for VMs: vmlinuz and modules/ (default /var/cache/vessel-setup/vm-kernel/current, where setup.sh unpacks Debian's cloud kernel)")
	f.BoolVar(&cfg.VMAnonymousRAM, "vm-anonymous-ram", envBool("VESSEL_VM_ANONYMOUS_RAM", false), "run VMs on anonymous RAM instead of a shared file in RUN/vm-ram (a tmpfs of vessel's own) that a stateful restore hands to the VM's next QEMU, whose load then finds its pages allocated")
	f.BoolVar(&cfg.VMRAMSmallPages, "vm-ram-small-pages", envBool("VESSEL_VM_RAM_SMALL_PAGES", false), "give VMs' RAM files small pages only (default: their tmpfs has huge=advise, so a booted QEMU's RAM is in 2 MiB pages and a stateful restore maps the kept pages 512 at a time)")
	f.BoolVar(&cfg.VMRestoreTHP, "vm-restore-thp", envBool("VESSEL_VM_RESTORE_THP", false), "keep transparent huge pages for the QEMU of a stateful VM restore (default off: where the host faults huge pages in slowly they hold the load to a fraction of the disk's speed)")
	f.StringVar(&cfg.Busybox, "busybox", env("VESSEL_BUSYBOX", cfg.Busybox), "static busybox for the built-in image")
	f.StringArrayVar(&defaultLimits, "default-limit", splitEnv("VESSEL_DEFAULT_LIMITS"), `a limit for containers that set none, KEY=VALUE (repeatable): e.g. limits.memory=2GiB, limits.processes=unlimited (default: limits.processes and limits.memory derived from the host, see 'vessel info')`)
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "default graceful stop timeout")
	f.DurationVar(&cfg.RestoreTimeout, "restore-timeout", cfg.RestoreTimeout, "longest a migration target's CRIU restore may take before it is killed and the source resumes the container")
	f.DurationVar(&cfg.MigrationTimeout, "migration-timeout", cfg.MigrationTimeout, "longest an incoming migration may take from its hello until its container runs here; then it is rolled back and the source resumes")
	f.IntVar(&cfg.MigrationSessions, "migration-sessions", cfg.MigrationSessions, "incoming migrations one peer may have at once (negative: no limit)")
	f.Int64Var(&cfg.MigrationImageLimit, "migration-image-limit", cfg.MigrationImageLimit, "bytes of checkpoint images an incoming migration of a container without limits.memory may store (default: the host's memory; negative: no limit)")
	f.StringVar(&cfg.SnapshotIO, "snapshot-io", env("VESSEL_SNAPSHOT_IO", cfg.SnapshotIO), "who writes a checkpoint's memory pages: vessel (O_DIRECT: CRIU's own direct writes after the thaw where CRIU has them, else vessel's writer) or criu (CRIU's own buffered writes, then fsync; for comparison)")
	f.StringVar(&cfg.SnapshotMemory, "snapshot-memory", env("VESSEL_SNAPSHOT_MEMORY", cfg.SnapshotMemory), "when a stateful snapshot's memory is written: background (after the thaw, pages write-protected until saved) or frozen (all while frozen; for comparison)")
	f.BoolVar(&cfg.KeepMigrationFiles, "keep-migration-files", os.Getenv("VESSEL_KEEP_MIGRATION_FILES") == "1", "keep migrations' checkpoint images and CRIU logs in RUN/migrate-kept (diagnostics)")
	f.StringArrayVar(&faults, "fault", nil, "inject a failure for tests: POINT=cut|fail|crash (see internal/daemon/faults.go)")
	_ = f.MarkHidden("fault")
	f.StringVar(&logLevel, "log-level", env("VESSEL_LOG_LEVEL", "info"), "debug, info, warn or error")
	return cmd
}

// parseKeyValues parses KEY=VALUE pairs.
func parseKeyValues(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func splitEnv(key string) []string {
	if v := os.Getenv(key); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

func run(ctx context.Context, cfg daemon.Config, log *slog.Logger) error {
	if cfg.ExternalGateway {
		cfg.NAT = false
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	d, err := daemon.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	ln, err := listenUnix(cfg.Socket)
	if err != nil {
		_ = d.Shutdown(context.Background())
		return err
	}
	handler := server.New(d, log)
	limits := server.DefaultLimits()
	limits.MaxConns = cfg.MaxConnections
	if cfg.HTTPReadTimeout > 0 {
		limits.ReadTimeout = cfg.HTTPReadTimeout
	}
	// Each listener has its own connection cap: a flood on the HTTPS
	// address does not lock the local administrator out of the socket.
	srv := server.NewHTTPServer(handler, limits)
	errc := make(chan error, 1+len(cfg.Listen))
	go func() { errc <- srv.Serve(server.Listen(ln, limits)) }()
	var remote []*http.Server
	for _, addr := range cfg.Listen {
		tcp, err := net.Listen("tcp", addr)
		if err != nil {
			_ = srv.Close()
			_ = d.Shutdown(context.Background())
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		rs := server.NewHTTPServer(handler, limits)
		remote = append(remote, rs)
		// TLS over the capped listener, not the other way round: the
		// server must see *tls.Conn to know the client's certificate.
		tl := tls.NewListener(server.Listen(tcp, limits), d.TLSConfig())
		go func() { errc <- rs.Serve(tl) }()
		log.Info("serving HTTPS", "address", addr, "fingerprint", d.Fingerprint())
	}
	pidFile := filepath.Join(cfg.Root, "vesseld.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		log.Warn("pid file", "err", err)
	}
	defer os.Remove(pidFile)
	log.Info("vesseld ready", "socket", cfg.Socket, "root", cfg.Root, "took", time.Since(started).Round(time.Millisecond))
	// Type=notify under systemd: units ordered after vesseld.service (and
	// `systemctl start` itself) wait until the API answers.
	if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify", "err", err)
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("vesseld shutting down")
	_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	for _, rs := range remote {
		_ = rs.Shutdown(shutCtx)
	}
	os.Remove(cfg.Socket)
	if serr := d.Shutdown(shutCtx); serr != nil {
		log.Warn("shutdown", "err", serr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// listenUnix listens on a root-only unix socket, replacing a stale socket
// file but refusing to steal one a live daemon is serving.
func listenUnix(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another vesseld is already serving %s", path)
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
