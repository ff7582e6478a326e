package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Default and limits of Config.MTU.
const (
	defaultMTU = 1500
	minMTU     = 68 // RFC 791's minimum for IPv4
	maxMTU     = 65535
)

// Manager builds a daemon's network: the bridge, NAT, and per-container
// netns files and veth pairs. Create it with New.
type Manager struct {
	cfg     Config // validated; Subnet masked, NetnsDir clean, MTU set
	layout  subnetLayout
	ipt     iptables
	filters portFilters
	tables  *tableParent // containers' namespaces are made from it
}

// New validates cfg and returns a Manager for it. It touches nothing on the
// host. Errors wrap ErrInvalidConfig and name the field: the bridge name must
// be a valid interface name of at most 15 bytes, Subnet an IPv4 prefix of /30
// or shorter (a host address like 10.0.0.7/24 is taken as its network),
// NetnsDir an absolute path, MTU 0 (1500) or 68..65535.
func New(cfg Config) (*Manager, error) {
	if err := validIfName(cfg.Bridge); err != nil {
		return nil, fmt.Errorf("%w: bridge: %w", ErrInvalidConfig, err)
	}
	l, err := layout(cfg.Subnet)
	if err != nil {
		return nil, fmt.Errorf("%w: subnet: %w", ErrInvalidConfig, err)
	}
	if !filepath.IsAbs(cfg.NetnsDir) {
		return nil, fmt.Errorf("%w: netns dir %q is not an absolute path", ErrInvalidConfig, cfg.NetnsDir)
	}
	if cfg.MTU == 0 {
		cfg.MTU = defaultMTU
	}
	if cfg.MTU < minMTU || cfg.MTU > maxMTU {
		return nil, fmt.Errorf("%w: mtu %d is outside %d..%d", ErrInvalidConfig, cfg.MTU, minMTU, maxMTU)
	}
	if cfg.Pool.IsValid() {
		pool := cfg.Pool.Masked()
		if !pool.Addr().Is4() || pool.Bits() < l.prefix.Bits() || !l.prefix.Contains(pool.Addr()) {
			return nil, fmt.Errorf("%w: pool %s is not inside subnet %s", ErrInvalidConfig, cfg.Pool, l.prefix)
		}
		cfg.Pool = pool
	}
	if cfg.Uplink != "" {
		if err := validIfName(cfg.Uplink); err != nil {
			return nil, fmt.Errorf("%w: uplink: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.ExternalGateway && cfg.NAT {
		return nil, fmt.Errorf("%w: NAT needs the gateway on this host's bridge", ErrInvalidConfig)
	}
	cfg.Subnet = l.prefix
	cfg.NetnsDir = filepath.Clean(cfg.NetnsDir)
	return &Manager{cfg: cfg, layout: l, tables: &tableParent{}, ipt: iptables{path: "iptables"},
		filters: portFilters{bridge: cfg.Bridge, dial: dialNFT}}, nil
}

// Allocate returns the lowest free address of this host's pool (the whole
// subnet by default); see the package function Allocate.
func (m *Manager) Allocate(used []netip.Addr) (netip.Addr, error) {
	if !m.cfg.Pool.IsValid() {
		return Allocate(m.layout.prefix, used)
	}
	return allocateIn(m.layout, m.cfg.Pool, used)
}

// CheckAddress reports whether addr may be given to a container on this
// host's subnet; see the package function CheckAddress.
func (m *Manager) CheckAddress(addr netip.Addr, used []netip.Addr) error {
	return CheckAddress(m.layout.prefix, addr, used)
}

// Gateway returns the containers' default gateway, the subnet's first host
// address (on the bridge, or on an external router with ExternalGateway).
func (m *Manager) Gateway() netip.Addr { return m.layout.gateway }

// Subnet returns the containers' subnet (masked).
func (m *Manager) Subnet() netip.Prefix { return m.layout.prefix }

// NetnsPath returns the path of the netns file for container name.
func (m *Manager) NetnsPath(name string) string { return filepath.Join(m.cfg.NetnsDir, name) }

// MountSysfs mounts on dir a sysfs of name's network namespace (see the
// function MountSysfs).
func (m *Manager) MountSysfs(name, dir string) error { return MountSysfs(m.NetnsPath(name), dir) }

// UnmountSysfs undoes MountSysfs and removes dir.
func (m *Manager) UnmountSysfs(dir string) error { return UnmountSysfs(dir, true) }

// Setup makes the host match the config; it is idempotent and cheap to run
// at every daemon start. It creates the bridge if it is missing, sets its MTU,
// puts the gateway address on it and brings it up. It creates the bridge's
// port filter table (portfilter.go) and drops the filters of ports whose
// veth no longer exists; the filters of attached ports stay. With NAT it
// turns on IPv4 forwarding and makes the masquerade and FORWARD rules match
// natRules; without NAT it removes rules an earlier configuration added.
// Last it creates NetnsDir as a private mount, so netns mounts made in it do
// not propagate to other mount namespaces.
func (m *Manager) Setup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("setup network: open netlink: %w", err)
	}
	defer h.Close()
	if err := m.ensureBridge(h); err != nil {
		return fmt.Errorf("setup bridge %s: %w", m.cfg.Bridge, err)
	}
	if err := m.filters.ensure(); err != nil {
		return fmt.Errorf("setup bridge %s: %w", m.cfg.Bridge, err)
	}
	if err := m.filters.prune(func(port string) bool { return linkExists(h, port) }); err != nil {
		return fmt.Errorf("setup bridge %s: %w", m.cfg.Bridge, err)
	}
	if m.cfg.NAT {
		err = m.ensureNAT(ctx)
	} else {
		err = m.removeNATIfInstalled(ctx)
	}
	if err != nil {
		return fmt.Errorf("setup nat for %s: %w", m.cfg.Bridge, err)
	}
	if err := ensureNetnsDir(m.cfg.NetnsDir); err != nil {
		return fmt.Errorf("setup netns dir: %w", err)
	}
	return nil
}

// Teardown undoes Setup; it is idempotent. It deletes every iptables rule
// tagged with this bridge's comment and the port filter table (every port's
// filter with it), deletes the bridge (its veth ports stay,
// detached, until Detach), and removes NetnsDir if no netns file is left in
// it, unmounting it first if it is a mount point. It keeps going after a
// failed step and returns all errors joined.
func (m *Manager) Teardown(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	if err := m.removeNATIfInstalled(ctx); err != nil {
		errs = append(errs, fmt.Errorf("teardown nat for %s: %w", m.cfg.Bridge, err))
	}
	if err := m.filters.destroy(); err != nil {
		errs = append(errs, fmt.Errorf("teardown bridge %s: %w", m.cfg.Bridge, err))
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		errs = append(errs, fmt.Errorf("teardown: open netlink: %w", err))
	} else {
		if err := deleteBridge(h, m.cfg.Bridge); err != nil {
			errs = append(errs, fmt.Errorf("teardown bridge %s: %w", m.cfg.Bridge, err))
		}
		h.Close()
	}
	if err := removeNetnsDir(m.cfg.NetnsDir); err != nil {
		errs = append(errs, fmt.Errorf("teardown netns dir: %w", err))
	}
	return errors.Join(errs...)
}

// removeNATIfInstalled is removeNAT, except that a host without iptables
// (where no rule can exist) is not an error: NAT-less setups need not
// install it.
func (m *Manager) removeNATIfInstalled(ctx context.Context) error {
	err := m.removeNAT(ctx)
	if errors.Is(err, exec.ErrNotFound) {
		return nil
	}
	return err
}
