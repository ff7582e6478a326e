package network

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AttachTap builds a VM's network: a persistent tap device named
// HostVethName(bridge, name) (so Detach, Guard and SetHostLink treat it as
// a container's host veth), an up port of the bridge, filtered like a
// veth (frames only from MACFor(addr), IPv4 only from addr). QEMU opens
// it by name (virtio-net); the guest configures addr itself (the returned
// Endpoint's Address and Gateway, from the kernel command line). The
// Endpoint has no Netns. A leftover link of the same name is removed
// first; on failure nothing is left.
func (m *Manager) AttachTap(ctx context.Context, name string, addr netip.Addr) (Endpoint, error) {
	if err := validContainerName(name); err != nil {
		return Endpoint{}, err
	}
	addr = addr.Unmap()
	if err := m.layout.checkHost(addr); err != nil {
		return Endpoint{}, fmt.Errorf("attach tap %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach tap %s: open netlink: %w", name, err)
	}
	defer host.Close()
	bridge, err := m.bridgeLink(host)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach tap %s: %w", name, err)
	}
	if err := m.detach(host, name); err != nil {
		return Endpoint{}, fmt.Errorf("attach tap %s: remove leftovers: %w", name, err)
	}
	ep := Endpoint{
		HostVeth: HostVethName(m.cfg.Bridge, name),
		Address:  netip.PrefixFrom(addr, m.layout.prefix.Bits()),
		Gateway:  m.layout.gateway,
		MAC:      MACFor(addr),
	}
	// Filtered before it exists, as a veth.
	if err := m.filterPort(ep); err != nil {
		return Endpoint{}, fmt.Errorf("attach tap %s: %w", name, err)
	}
	la := netlink.NewLinkAttrs()
	la.Name = ep.HostVeth
	la.MTU = m.cfg.MTU
	la.MasterIndex = bridge.Attrs().Index
	tap := &netlink.Tuntap{LinkAttrs: la, Mode: netlink.TUNTAP_MODE_TAP,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
	if err := host.LinkAdd(tap); err != nil {
		_ = m.filters.remove(ep.HostVeth)
		return Endpoint{}, fmt.Errorf("attach tap %s: create %s: %w", name, ep.HostVeth, err)
	}
	if err := host.LinkSetUp(tap); err != nil {
		_ = deleteLinkByName(host, ep.HostVeth)
		_ = m.filters.remove(ep.HostVeth)
		return Endpoint{}, fmt.Errorf("attach tap %s: set up %s: %w", name, ep.HostVeth, err)
	}
	return ep, nil
}
