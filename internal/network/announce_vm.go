package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/packet"
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
