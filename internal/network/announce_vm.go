package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AnnounceFromBridge sends gratuitous ARP for ip at mac from the bridge
// device itself (this netns): whole Ethernet frames whose source is mac,
// flooded to the bridge's ports and so out of its uplink, at announceAt.
// A VM moved live needs it: QEMU leaves the announcement to the guest
// (virtio-net's guest announce), which sends it only once it runs again,
// and until then the segment keeps sending its frames to the host it left.
// A frame the bridge device transmits teaches its own forwarding table
// nothing (it learns from its ports' ingress only), so the VM's port stays
// where frames for mac go on this host.
func AnnounceFromBridge(ctx context.Context, bridge string, mac net.HardwareAddr, ip netip.Addr) error {
	if err := validIfName(bridge); err != nil {
		return err
	}
	if len(mac) != 6 || !ip.Is4() {
		return fmt.Errorf("announce from %s: bad address %s %s", bridge, mac, ip)
	}
	ifi, err := net.InterfaceByName(bridge)
	if err != nil {
		return fmt.Errorf("announce from %s: %w", bridge, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
	if err != nil {
		return fmt.Errorf("announce from %s: open packet socket: %w", bridge, err)
	}
	defer conn.Close()
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame := make([]byte, 0, 14+28)
	frame = append(frame, bcast...)
	frame = append(frame, mac...)
	frame = append(frame, byte(unix.ETH_P_ARP>>8), byte(unix.ETH_P_ARP&0xff))
	frame = append(frame, arpAnnouncement(mac, ip)...)
	start := time.Now()
	for _, at := range announceAt {
		if err := sleepCtx(ctx, at-time.Since(start)); err != nil {
			return err
		}
		if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: bcast}); err != nil {
			return fmt.Errorf("announce from %s: send gratuitous ARP: %w", bridge, err)
		}
	}
	return nil
}

// ClaimMAC points bridge's forwarding entry for mac at port, one of its
// ports (a VM's tap): a dynamic entry, as the bridge would have learnt
// from a frame port received from mac, and which it ages and moves again
// the same way. A VM moved in live needs it: while it ran on the other
// host the bridge learnt mac behind its uplink (the VM's broadcasts, the
// other host's announcements of it), and it drops frames for mac coming
// in through that uplink (a frame does not go back out of the port it
// came in through) until the guest itself sends one through its tap. The
// guest's own announcement is late (it runs it once QEMU's self-announce
// reaches it, slow under TCG) and QEMU's RARPs never reach the bridge
// (the port filter passes IPv4 and ARP only). The port must forward (a
// tap QEMU has open): the kernel refuses an entry on a disabled port.
func ClaimMAC(bridge, port string, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("claim %s on %s: bad MAC", mac, port)
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("claim %s on %s: %w", mac, port, err)
	}
	l, err := netlink.LinkByName(port)
	if err != nil {
		return fmt.Errorf("claim %s on %s: %w", mac, port, err)
	}
	if l.Attrs().MasterIndex != br.Attrs().Index {
		return fmt.Errorf("claim %s on %s: not a port of %s", mac, port, bridge)
	}
	// NUD_REACHABLE: a dynamic entry (NOARP or PERMANENT would make it
	// static, never moving); NeighSet replaces the learnt one.
	err = netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE,
		Flags: netlink.NTF_MASTER, State: netlink.NUD_REACHABLE, HardwareAddr: mac})
	if err != nil {
		return fmt.Errorf("claim %s on %s: %w", mac, port, err)
	}
	return nil
}
