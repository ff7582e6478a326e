package network

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ensureBridge creates the bridge if it is missing and brings it to the
// configured state: MTU, gateway address, up.
func (m *Manager) ensureBridge(h *netlink.Handle) error {
	link, err := h.LinkByName(m.cfg.Bridge)
	if isLinkNotFound(err) {
		la := netlink.NewLinkAttrs()
		la.Name = m.cfg.Bridge
		la.MTU = m.cfg.MTU
		// EEXIST: another process created it since the lookup; use theirs.
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create bridge: %w", err)
		}
		link, err = h.LinkByName(m.cfg.Bridge)
	}
	if err != nil {
		return fmt.Errorf("look up bridge: %w", err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("%w: %s is a %s", ErrNotBridge, m.cfg.Bridge, link.Type())
	}
	if link.Attrs().MTU != m.cfg.MTU {
		if err := h.LinkSetMTU(link, m.cfg.MTU); err != nil {
			return fmt.Errorf("set mtu %d: %w", m.cfg.MTU, err)
		}
	}
	// AddrReplace is idempotent where AddrAdd would fail with EEXIST.
	if !m.cfg.ExternalGateway {
		if err := h.AddrReplace(link, m.gatewayAddr()); err != nil {
			return fmt.Errorf("add gateway address %s: %w", m.gatewayAddr().IPNet, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	if m.cfg.Uplink != "" {
		up, err := h.LinkByName(m.cfg.Uplink)
		if err != nil {
			return fmt.Errorf("look up uplink %s: %w", m.cfg.Uplink, err)
		}
		if up.Attrs().MasterIndex != link.Attrs().Index {
			if err := h.LinkSetMaster(up, link); err != nil {
				return fmt.Errorf("enslave uplink %s: %w", m.cfg.Uplink, err)
			}
		}
		if err := h.LinkSetUp(up); err != nil {
			return fmt.Errorf("set uplink %s up: %w", m.cfg.Uplink, err)
		}
	}
	return nil
}

// gatewayAddr is the gateway with the subnet's prefix length.
func (m *Manager) gatewayAddr() *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{
		IP:   m.layout.gateway.AsSlice(),
		Mask: net.CIDRMask(m.layout.prefix.Bits(), 32),
	}}
}

// bridgeLink returns the bridge, or ErrNoBridge if Setup has not created it.
func (m *Manager) bridgeLink(h *netlink.Handle) (netlink.Link, error) {
	link, err := h.LinkByName(m.cfg.Bridge)
	if isLinkNotFound(err) {
		return nil, fmt.Errorf("%w: %s (run Setup first)", ErrNoBridge, m.cfg.Bridge)
	}
	if err != nil {
		return nil, fmt.Errorf("look up bridge %s: %w", m.cfg.Bridge, err)
	}
	if link.Type() != "bridge" {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotBridge, m.cfg.Bridge, link.Type())
	}
	return link, nil
}

// deleteBridge deletes the bridge if it exists. A link of that name that is
// not a bridge is someone else's and is left alone.
func deleteBridge(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up: %w", err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("%w: %s is a %s; not deleting it", ErrNotBridge, name, link.Type())
	}
	if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}
