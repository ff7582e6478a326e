package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// hostConfig is what `vessel admin init` sets up: the settings it writes
// into vesseld's environment file (VESSEL_<FLAG>=value, read by
// vesseld.service through EnvironmentFile=).
type hostConfig struct {
	// StorageDevice is a block device for the pool (formatted btrfs by
	// init); empty: a loop-backed pool file of StorageSize bytes in
	// /var/lib/vessel (0: vesseld's default).
	StorageDevice string
	StorageSize   int64
	// StorageDeviceIdle is BFQ's slice_idle on the storage device once a
	// disk weight is set on cgroup v2 (vesseld --storage-device-idle; 0:
	// BFQ's own 8 ms). Only written with a storage device: a pool file's
	// loop device keeps BFQ's tunables.
	StorageDeviceIdle time.Duration
	Bridge            string
	Subnet            string
	// Listen are HTTPS addresses (host:port) for remote clients and
	// peers; none: the local unix socket only.
	Listen []string
}

// Defaults of a new host: vesseld's own.
const (
	defaultBridge      = "vesselbr0"
	defaultSubnet      = "10.87.0.0/24"
	defaultStorageSize = 20 << 30
	// minStorageSize is the smallest pool init accepts: btrfs needs
	// ~115 MiB for itself, and an image or two must fit.
	minStorageSize = 1 << 30
	// defaultStorageDeviceIdle is the package's slice_idle for a storage
	// device: with BFQ's 8 ms two readers weighted 200:100 on the guest
	// lane's virtual disk split 1.0-1.6:1, with 30 ms (and low_latency
	// off, which vesseld always sets there) 1.8-1.9:1 (README, "Debian
	// 13 guests"). It only lengthens the wait for a reader's next request
	// on a disk vessel owns, and only once a disk weight is set.
	defaultStorageDeviceIdle = 30 * time.Millisecond
	// maxStorageDeviceIdle bounds it: longer idling wastes the disk.
	maxStorageDeviceIdle = time.Second
	// defaultEnvFile is vesseld.service's EnvironmentFile.
	defaultEnvFile = "/etc/vessel/vesseld.env"
)

func defaultHostConfig() hostConfig {
	return hostConfig{Bridge: defaultBridge, Subnet: defaultSubnet, StorageDeviceIdle: defaultStorageDeviceIdle}
}

// errInvalid marks a setting init refuses.
var errInvalid = errors.New("invalid setting")

// validate checks every setting and normalizes the subnet (10.87.0.1/24
// becomes 10.87.0.0/24).
func (c *hostConfig) validate() error {
	if c.StorageDevice != "" {
		if !filepath.IsAbs(c.StorageDevice) || filepath.Clean(c.StorageDevice) != c.StorageDevice {
			return fmt.Errorf("%w: storage device %q: want an absolute path such as /dev/vdb", errInvalid, c.StorageDevice)
		}
		if c.StorageSize != 0 {
			return fmt.Errorf("%w: a storage size is for a pool file; a storage device's pool has the device's size", errInvalid)
		}
	}
	if c.StorageDeviceIdle < 0 || c.StorageDeviceIdle > maxStorageDeviceIdle {
		return fmt.Errorf("%w: storage device idle %s: want 0 (BFQ's own) to %s", errInvalid, c.StorageDeviceIdle, maxStorageDeviceIdle)
	}
	if c.StorageSize != 0 && c.StorageSize < minStorageSize {
		return fmt.Errorf("%w: storage size %s: want at least %s", errInvalid, formatSize(c.StorageSize), formatSize(minStorageSize))
	}
	if err := validIfname(c.Bridge); err != nil {
		return fmt.Errorf("%w: bridge %q: %w", errInvalid, c.Bridge, err)
	}
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !p.Addr().Is4() {
		return fmt.Errorf("%w: subnet %q: want an IPv4 CIDR such as %s", errInvalid, c.Subnet, defaultSubnet)
	}
	if p.Bits() > 30 {
		return fmt.Errorf("%w: subnet %s: too small for a gateway and containers (want /30 or larger)", errInvalid, c.Subnet)
	}
	c.Subnet = p.Masked().String()
	for _, l := range c.Listen {
		if err := validListen(l); err != nil {
			return fmt.Errorf("%w: listen address %q: %w", errInvalid, l, err)
		}
	}
	return nil
}

// validIfname checks a network interface name as the kernel does
// (dev_valid_name): 1 to 15 bytes, not "." or "..", no '/', ':' or space.
func validIfname(name string) error {
	switch {
	case name == "" || len(name) > 15:
		return errors.New("want 1 to 15 characters")
	case name == "." || name == "..":
		return errors.New("not a name")
	case strings.ContainsAny(name, "/: \t\n\"'\\$"):
		return errors.New("no '/', ':', quotes or spaces")
	}
	return nil
}

// validListen checks a host:port address (the host may be empty: every
// address).
func validListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port, e.g. :8443 or 192.0.2.10:8443")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("port must be 1..65535")
	}
	if host != "" && strings.ContainsAny(host, " \t\"'\\$,") {
		return errors.New("bad host")
	}
	return nil
}

// renderEnv returns the environment file for c (validated): one
// VESSEL_<FLAG>=value line per setting, unquoted (validate admits no
// character systemd or a shell would treat specially).
func renderEnv(c hostConfig, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# vesseld's settings, written by `vessel admin init` on %s.\n", now.UTC().Format(time.RFC3339))
	b.WriteString("# vesseld.service reads this file (EnvironmentFile=); each line sets one of\n")
	b.WriteString("# vesseld's flags as VESSEL_<FLAG>=value (see vesseld --help). Restart vesseld\n")
	b.WriteString("# after a change: systemctl restart vesseld\n")
	if c.StorageDevice != "" {
		b.WriteString("# The pool: a btrfs filesystem on this device, mounted at /var/lib/vessel/storage-pools/default.\n")
		fmt.Fprintf(&b, "VESSEL_STORAGE_DEVICE=%s\n", c.StorageDevice)
		b.WriteString("# BFQ's slice_idle on it once a disk weight (limits.disk.weight) is set on cgroup v2\n")
		b.WriteString("# (low_latency is turned off then too): long enough for a weighted reader's next\n")
		b.WriteString("# request, so that weights split the disk. 0: BFQ's own (8ms).\n")
		fmt.Fprintf(&b, "VESSEL_STORAGE_DEVICE_IDLE=%s\n", c.StorageDeviceIdle)
	} else {
		b.WriteString("# The pool: a btrfs filesystem in a sparse file, /var/lib/vessel/disks/default.img,\n")
		b.WriteString("# made this size (MiB) when it does not exist yet.\n")
		size := c.StorageSize
		if size == 0 {
			size = defaultStorageSize
		}
		fmt.Fprintf(&b, "VESSEL_STORAGE_SIZE=%d\n", size>>20)
	}
	b.WriteString("# The containers' network: a bridge and an IPv4 subnet (NAT to the outside).\n")
	fmt.Fprintf(&b, "VESSEL_BRIDGE=%s\n", c.Bridge)
	fmt.Fprintf(&b, "VESSEL_SUBNET=%s\n", c.Subnet)
	if len(c.Listen) > 0 {
		b.WriteString("# HTTPS for remote clients and peer hosts (mutual TLS).\n")
		fmt.Fprintf(&b, "VESSEL_LISTEN=%s\n", strings.Join(c.Listen, ","))
	}
	return b.String()
}

// parseEnv reads the settings init manages back from an environment file
// (comments and other lines are skipped).
func parseEnv(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return out
}

// parseSize parses a size such as 20GiB, 500MiB, 1TiB, 30G (powers of
// 1024 either way) or a bare number of bytes.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: size %q: want e.g. 20GiB", errInvalid, s)
	}
	shift := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
		"G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("%w: size %q: unknown unit %q (want MiB, GiB or TiB)", errInvalid, s, unit)
	}
	if n > (1<<62)>>sh {
		return 0, fmt.Errorf("%w: size %q is too large", errInvalid, s)
	}
	return n << sh, nil
}

// formatSize prints a size in the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
