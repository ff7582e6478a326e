package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/revert"
)

// Attach builds container name's network: a netns file at NetnsPath(name)
// and a veth pair whose host end, HostVethName(bridge, name), is an up port
// of the bridge and whose other end is "eth0" in the netns, with MAC
// MACFor(addr), address addr/subnet-bits, and a default route via Gateway;
// "lo" is up too. The port's filter (portfilter.go) is in place before the
// veth exists: the bridge takes from the port only frames from that MAC,
// IPv4 from addr and ARP claiming addr at that MAC. The bridge must exist (Setup); addr must be a container
// address of the subnet (ErrAddressOutside, ErrAddressInUse for the gateway)
// whose uniqueness the caller has checked (CheckAddress).
//
// A netns or host veth left for name by a crash or an earlier Attach is
// removed first, so Attach always builds afresh; on failure it removes what
// it built.
func (m *Manager) Attach(ctx context.Context, name string, addr netip.Addr) (_ Endpoint, err error) {
	if err := validContainerName(name); err != nil {
		return Endpoint{}, err
	}
	addr = addr.Unmap()
	if err := m.layout.checkHost(addr); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: open netlink: %w", name, err)
	}
	defer host.Close()
	bridge, err := m.bridgeLink(host)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	if err := m.detach(host, name); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: remove leftovers: %w", name, err)
	}

	r := revert.New()
	defer r.Fail()
	path := m.NetnsPath(name)
	parent, err := m.tables.get()
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	if err := createNetns(path, parent); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	// An undo that fails is reported with the failure it undoes.
	undo := func(what string, uerr error) {
		if uerr != nil {
			err = errors.Join(err, fmt.Errorf("attach %s: undo: %s: %w", name, what, uerr))
		}
	}
	r.Add(func() { undo("remove netns", removeNetns(path)) })
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: open netns: %w", name, err)
	}
	defer ns.Close()
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}

	ep := Endpoint{
		Netns:    path,
		HostVeth: HostVethName(m.cfg.Bridge, name),
		Address:  netip.PrefixFrom(addr, m.layout.prefix.Bits()),
		Gateway:  m.layout.gateway,
		MAC:      MACFor(addr),
	}
	// The port is filtered before it exists: no frame of the container
	// ever crosses the bridge unchecked.
	if err := m.filterPort(ep); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	r.Add(func() { undo("remove port filter", m.filters.remove(ep.HostVeth)) })
	if err := m.addVeth(host, bridge, ns, ep); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: %w", name, err)
	}
	r.Add(func() { undo("delete veth", deleteLinkByName(host, ep.HostVeth)) })
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	if err := configureContainerSide(ns, ep); err != nil {
		return Endpoint{}, fmt.Errorf("attach %s: in netns: %w", name, err)
	}
	r.Success()
	return ep, nil
}

// addVeth creates the veth pair with its container end created directly in
// ns as eth0 (so it never appears in the host namespace, and no temporary
// name can clash there), and brings the host end up as a bridge port.
func (m *Manager) addVeth(host *netlink.Handle, bridge netlink.Link, ns netns.NsHandle, ep Endpoint) error {
	mac, err := net.ParseMAC(ep.MAC)
	if err != nil {
		return fmt.Errorf("parse mac %s: %w", ep.MAC, err)
	}
	la := netlink.NewLinkAttrs()
	la.Name = ep.HostVeth
	la.MTU = m.cfg.MTU
	la.MasterIndex = bridge.Attrs().Index
	veth := netlink.NewVeth(la)
	veth.PeerName = containerIfName
	veth.PeerHardwareAddr = mac
	veth.PeerNamespace = netlink.NsFd(ns)
	if err := host.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", ep.HostVeth, err)
	}
	if err := host.LinkSetUp(veth); err != nil {
		_ = deleteLinkByName(host, ep.HostVeth)
		return fmt.Errorf("set up veth %s: %w", ep.HostVeth, err)
	}
	return nil
}

// configureContainerSide brings lo and eth0 up in ns, gives eth0 its address
// and adds the default route via the gateway.
func configureContainerSide(ns netns.NsHandle, ep Endpoint) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("look up lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set up lo: %w", err)
	}
	eth0, err := h.LinkByName(containerIfName)
	if err != nil {
		return fmt.Errorf("look up %s: %w", containerIfName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   ep.Address.Addr().AsSlice(),
		Mask: net.CIDRMask(ep.Address.Bits(), 32),
	}}
	if err := h.AddrAdd(eth0, addr); err != nil {
		return fmt.Errorf("add address %s: %w", ep.Address, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("set up %s: %w", containerIfName, err)
	}
	// The gateway is on-link through eth0's address, so the route needs
	// eth0 up with its address first.
	route := &netlink.Route{
		LinkIndex: eth0.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Gw:        ep.Gateway.AsSlice(),
	}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("add default route via %s: %w", ep.Gateway, err)
	}
	return nil
}

// Detach removes container name's network: it deletes the host veth (which
// deletes eth0 with it) and unmounts and removes the netns file. It is
// idempotent. Processes still in the namespace keep it alive, without eth0.
func (m *Manager) Detach(ctx context.Context, name string) error {
	if err := validContainerName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("detach %s: open netlink: %w", name, err)
	}
	defer host.Close()
	if err := m.detach(host, name); err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	return nil
}

// detach is Detach on an open netlink handle. The port's filter goes after
// the veth, so the port never exists unfiltered.
func (m *Manager) detach(host *netlink.Handle, name string) error {
	port := HostVethName(m.cfg.Bridge, name)
	if err := deleteLinkByName(host, port); err != nil {
		return err
	}
	if err := m.filters.remove(port); err != nil {
		return err
	}
	return removeNetns(m.NetnsPath(name))
}

// filterPort installs (or replaces) the filter of ep's host veth.
func (m *Manager) filterPort(ep Endpoint) error {
	mac, err := net.ParseMAC(ep.MAC)
	if err != nil {
		return fmt.Errorf("parse mac %s: %w", ep.MAC, err)
	}
	return m.filters.install(ep.HostVeth, mac, ep.Address.Addr())
}

// Guard installs again the port filter of container name, attached with
// addr: a daemon adopting a running container repairs a filter that is
// missing (a container started by a vessel without port filters, a flushed
// ruleset) or stale. It replaces the filter in one atomic step and does not
// touch the link or the namespace.
func (m *Manager) Guard(ctx context.Context, name string, addr netip.Addr) error {
	if err := validContainerName(name); err != nil {
		return err
	}
	addr = addr.Unmap()
	if err := m.layout.checkHost(addr); err != nil {
		return fmt.Errorf("guard %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ep := Endpoint{HostVeth: HostVethName(m.cfg.Bridge, name), MAC: MACFor(addr),
		Address: netip.PrefixFrom(addr, m.layout.prefix.Bits())}
	if err := m.filterPort(ep); err != nil {
		return fmt.Errorf("guard %s: %w", name, err)
	}
	return nil
}

// Exists reports whether container name's netns file is a live namespace
// mount (and not, say, an empty file left by a crash).
func (m *Manager) Exists(name string) bool {
	if validContainerName(name) != nil {
		return false
	}
	return isNetnsMount(m.NetnsPath(name))
}

// SetHostLink brings a container's host-side veth up or down. Down cuts the
// container off the bridge without touching its namespace: vessel's network
// lock while a container is checkpointed or restored (CRIU's own iptables
// lock costs tens of milliseconds of frozen time).
func (m *Manager) SetHostLink(name string, up bool) error {
	link, err := netlink.LinkByName(HostVethName(m.cfg.Bridge, name))
	if err != nil {
		return fmt.Errorf("host veth of %s: %w", name, err)
	}
	if up {
		err = netlink.LinkSetUp(link)
	} else {
		err = netlink.LinkSetDown(link)
	}
	if err != nil {
		return fmt.Errorf("set host veth of %s up=%v: %w", name, up, err)
	}
	return nil
}
