package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vesselhost/vessel/internal/client"
)

func newAdminCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Set up this host",
	}
	cmd.AddCommand(newAdminInitCmd(g))
	return cmd
}

// initOptions are admin init's flags.
type initOptions struct {
	auto    bool
	force   bool
	size    string
	envFile string
	cfg     hostConfig
}

// apiWait bounds how long init waits for vesseld's API after the restart.
const apiWait = 2 * time.Minute

func newAdminInitCmd(_ *globals) *cobra.Command {
	o := &initOptions{cfg: defaultHostConfig()}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Set up this host's storage pool, network and API, then (re)start vesseld",
		Long: `init configures vesseld on this host, like incus admin init.

Without --auto it asks a few questions on a terminal, each with a default;
with --auto it asks none and takes the flags and the defaults: a 20GiB pool
file in /var/lib/vessel, the bridge vesselbr0 with 10.87.0.0/24, the local
unix socket only.

It writes /etc/vessel/vesseld.env (vesseld's flags as VESSEL_<FLAG>=value),
restarts vesseld.service when systemd runs this host (else it says how to
start vesseld), waits for the API and prints a summary.

--storage-device DEV makes a btrfs filesystem on DEV for the pool, with
--storage-device-idle (30ms) as BFQ's slice_idle there once a disk weight is
set on cgroup v2 (so that limits.disk.weight splits the disk). A device
in use (mounted, swap, a RAID or LVM member) is refused; one that holds a
filesystem or a partition table is refused unless --force, which erases it.

On a host already set up (the file exists) init says so and changes nothing,
unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInit(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.auto, "auto", false, "ask nothing: take the flags and the defaults")
	f.BoolVar(&o.force, "force", false, "set up an initialized host again; erase a storage device's filesystem or partition table")
	f.StringVar(&o.cfg.StorageDevice, "storage-device", "", "block device for the pool (formatted btrfs); default: a pool file in /var/lib/vessel")
	f.DurationVar(&o.cfg.StorageDeviceIdle, "storage-device-idle", o.cfg.StorageDeviceIdle, "BFQ's slice_idle on the storage device for disk weights on cgroup v2 (0: BFQ's own, 8ms)")
	f.StringVar(&o.size, "storage-size", "", "size of the pool file, e.g. 50GiB (default 20GiB)")
	f.StringVar(&o.cfg.Bridge, "bridge", o.cfg.Bridge, "the containers' bridge")
	f.StringVar(&o.cfg.Subnet, "subnet", o.cfg.Subnet, "the containers' IPv4 subnet")
	f.StringSliceVar(&o.cfg.Listen, "listen", nil, "HTTPS address for remote clients and peers, host:port (repeatable; default: the unix socket only)")
	f.StringVar(&o.envFile, "env-file", defaultEnvFile, "vesseld's environment file")
	_ = f.MarkHidden("env-file")
	return cmd
}

func runInit(ctx context.Context, in io.Reader, out io.Writer, o *initOptions) error {
	if os.Geteuid() != 0 {
		return errors.New("vessel admin init sets up the host: run it as root")
	}
	old, err := os.ReadFile(o.envFile)
	switch {
	case err == nil && !o.force:
		fmt.Fprintf(out, "This host is set up already (%s); nothing changed. --force sets it up again.\n", o.envFile)
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	if o.size != "" {
		if o.cfg.StorageSize, err = parseSize(o.size); err != nil {
			return err
		}
	}
	if !o.auto {
		if f, ok := in.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
			return errors.New("not a terminal to ask on: use --auto (with flags for what is not the default)")
		}
		if err := ask(bufio.NewReader(in), out, &o.cfg); err != nil {
			return err
		}
	}
	if err := o.cfg.validate(); err != nil {
		return err
	}
	if err := prepareDevice(ctx, out, o, parseEnv(string(old))); err != nil {
		return err
	}
	if err := writeEnvFile(o.envFile, renderEnv(o.cfg, time.Now())); err != nil {
		return err
	}
	fmt.Fprintf(out, "Wrote %s\n", o.envFile)
	if !systemdRunning() {
		fmt.Fprintf(out, "systemd does not run this host: start vesseld with its settings:\n"+
			"  set -a; . %s; set +a; vesseld &\n", o.envFile)
		return nil
	}
	fmt.Fprintln(out, "Restarting vesseld.service")
	if b, err := exec.CommandContext(ctx, "systemctl", "restart", "vesseld.service").CombinedOutput(); err != nil {
		return fmt.Errorf("systemctl restart vesseld.service: %w: %s (see journalctl -u vesseld)", err, strings.TrimSpace(string(b)))
	}
	return summary(ctx, out)
}

// prepareDevice formats the storage device, unless it is the one the
// previous configuration used (a --force re-run keeps its pool).
func prepareDevice(ctx context.Context, out io.Writer, o *initOptions, old map[string]string) error {
	dev := o.cfg.StorageDevice
	if dev == "" {
		return nil
	}
	if prev := old["VESSEL_STORAGE_DEVICE"]; prev != "" && sameDevice(prev, dev) {
		fmt.Fprintf(out, "Keeping the pool on %s\n", prev)
		o.cfg.StorageDevice = prev
		return nil
	}
	info, err := probeDevice(ctx, dev)
	if err != nil {
		return err
	}
	if err := checkDevice(dev, info, o.force); err != nil {
		return err
	}
	fmt.Fprintf(out, "Making a btrfs filesystem on %s\n", dev)
	path, err := formatDevice(ctx, dev, o.force)
	if err != nil {
		return err
	}
	o.cfg.StorageDevice = path
	return nil
}

// ask asks for each setting on a terminal, the current value as default.
func ask(r *bufio.Reader, out io.Writer, c *hostConfig) error {
	prompt := func(q, def string) (string, error) {
		fmt.Fprintf(out, "%s [%s]: ", q, def)
		line, err := r.ReadString('\n')
		if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
			return "", fmt.Errorf("read answer: %w", err)
		}
		if line = strings.TrimSpace(line); line != "" {
			return line, nil
		}
		return def, nil
	}
	dev, err := prompt("Block device for the storage pool (erased), or 'file' for a pool file in /var/lib/vessel", nonEmpty(c.StorageDevice, "file"))
	if err != nil {
		return err
	}
	c.StorageDevice = ""
	if dev != "file" {
		c.StorageDevice = dev
		c.StorageSize = 0
	} else {
		size := int64(defaultStorageSize)
		if c.StorageSize != 0 {
			size = c.StorageSize
		}
		s, err := prompt("Size of the pool file", formatSize(size))
		if err != nil {
			return err
		}
		if c.StorageSize, err = parseSize(s); err != nil {
			return err
		}
	}
	if c.Bridge, err = prompt("Bridge for the containers", c.Bridge); err != nil {
		return err
	}
	if c.Subnet, err = prompt("IPv4 subnet of the containers", c.Subnet); err != nil {
		return err
	}
	l, err := prompt("HTTPS address for remote clients and peers, host:port ('none': the unix socket only)", nonEmpty(strings.Join(c.Listen, ","), "none"))
	if err != nil {
		return err
	}
	c.Listen = nil
	if l != "none" {
		c.Listen = strings.Split(l, ",")
	}
	return nil
}

// writeEnvFile writes the file atomically (a crash leaves the old one or
// the new one), readable by all: it holds no secret.
func writeEnvFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// summary waits for vesseld's API and prints what it runs with.
func summary(ctx context.Context, out io.Writer) error {
	c := client.NewUnix(localSocket())
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	srv, err := c.Server(ctx)
	for err != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("vesseld did not answer on %s within %v: %w (see journalctl -u vesseld)", localSocket(), apiWait, err)
		case <-time.After(500 * time.Millisecond):
		}
		srv, err = c.Server(ctx)
	}
	pool, err := c.Storage(ctx)
	if err != nil {
		return err
	}
	h := srv.Host
	fmt.Fprintf(out, "vesseld is up on %s\n", h.Hostname)
	fmt.Fprintf(out, "  storage   %s at %s, %s free of %s\n", pool.Driver, pool.Path, humanBytes(pool.Free), humanBytes(pool.Total))
	fmt.Fprintf(out, "  cgroups   %s\n", h.CgroupVersion)
	fmt.Fprintf(out, "  runc      %s\n  CRIU      %s\n", h.RuncVersion, h.CRIUVersion)
	fmt.Fprintf(out, "  API       %s (fingerprint %s)\n", localSocket(), srv.Fingerprint)
	fmt.Fprintln(out, "Try: vessel launch busybox c1 && vessel list")
	return nil
}
