package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
)

// linkWait bounds the wait for the network interface to appear.
const linkWait = 30 * time.Second

// setupNetwork brings lo up and configures the interface vessel.net names:
// its address, the default route via the gateway, and (only when a DNS
// server is given) root's /etc/resolv.conf.
func setupNetwork(n *netConfig, root string) error {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	link, err := waitLink(n)
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.Addr.Addr().AsSlice(), Mask: net.CIDRMask(n.Addr.Bits(), n.Addr.Addr().BitLen())}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", n.Addr, link.Attrs().Name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("up %s: %w", link.Attrs().Name, err)
	}
	if n.GW.IsValid() {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: n.GW.AsSlice()}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("default route via %s: %w", n.GW, err)
		}
	}
	if n.DNS.IsValid() {
		conf := fmt.Sprintf("# written by vessel-agent from vessel.net=\nnameserver %s\n", n.DNS)
		p := filepath.Join(root, "etc/resolv.conf")
		// resolv.conf may be a link (systemd-resolved's); replace it.
		_ = os.Remove(p)
		if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
			return err
		}
	}
	logf("network: %s %s gw %v", link.Attrs().Name, n.Addr, n.GW)
	return nil
}

// waitLink finds the interface by name or MAC, waiting for its driver.
func waitLink(n *netConfig) (netlink.Link, error) {
	deadline := time.Now().Add(linkWait)
	for {
		if n.MAC == nil {
			if l, err := netlink.LinkByName(n.Name); err == nil {
				return l, nil
			}
		} else if links, err := netlink.LinkList(); err == nil {
			for _, l := range links {
				if bytes.Equal(l.Attrs().HardwareAddr, n.MAC) {
					return l, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no interface %s%s after %s", n.Name, n.MAC, linkWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
