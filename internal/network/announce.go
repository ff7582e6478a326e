package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// announceAt are the times, after both ends of a container's link are up,
// at which Announce sends its gratuitous ARP: at once, then twice more in
// case a frame was lost while the bridge ports settled (RFC 5227 announces
// twice; QEMU sends five after a migration).
var announceAt = []time.Duration{0, 20 * time.Millisecond, 200 * time.Millisecond}

// linkUpWait bounds how long Announce waits for the links' operational
// state to come up after SetHostLink(up).
const linkUpWait = 500 * time.Millisecond

// Announce sends gratuitous ARP for container name's IPv4 addresses from
// eth0 inside its netns: an ARP request from and for the container's own
// address at its MAC, to the broadcast address (an "ARP announcement",
// RFC 5227). Switches and bridges on the segment learn from it which port
// the MAC is behind now, and neighbours refresh their caches: after a live
// move, until the container sends a frame itself, packets for it would
// otherwise still go to the host it left (the MAC is the same on both
// hosts, MACFor). It waits for eth0 and the host veth to be operationally
// up (a frame sent before the kernel has activated eth0's queue is silently
// dropped) and returns after the last announcement (announceAt).
func (m *Manager) Announce(ctx context.Context, name string) error {
	if err := validContainerName(name); err != nil {
		return err
	}
	ns, err := netns.GetFromPath(m.NetnsPath(name))
	if err != nil {
		return fmt.Errorf("announce %s: open netns: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("announce %s: open netlink: %w", name, err)
	}
	defer h.Close()
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("announce %s: open netlink: %w", name, err)
	}
	defer host.Close()
	if _, err := waitOperUp(ctx, host, HostVethName(m.cfg.Bridge, name)); err != nil {
		return fmt.Errorf("announce %s: %w", name, err)
	}
	eth0, err := waitOperUp(ctx, h, containerIfName)
	if err != nil {
		return fmt.Errorf("announce %s: %w", name, err)
	}
	forgetUnresolved(h, eth0)
	addrs, err := h.AddrList(eth0, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("announce %s: addresses of %s: %w", name, containerIfName, err)
	}
	var frames [][]byte
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			frames = append(frames, arpAnnouncement(eth0.Attrs().HardwareAddr, ip))
		}
	}
	if len(frames) == 0 {
		return fmt.Errorf("announce %s: %s has no IPv4 address", name, containerIfName)
	}
	// The socket is made in the container's netns (a packet socket stays
	// bound to the namespace it was created in); sending needs no more.
	var conn *packet.Conn
	err = onThreadIn(func() error { return netns.Set(ns) }, func() error {
		ifi := &net.Interface{Index: eth0.Attrs().Index, Name: containerIfName}
		var err error
		conn, err = packet.Listen(ifi, packet.Datagram, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("announce %s: open packet socket: %w", name, err)
	}
	defer conn.Close()
	bcast := &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	start := time.Now()
	for _, at := range announceAt {
		if err := sleepCtx(ctx, at-time.Since(start)); err != nil {
			return err
		}
		for _, f := range frames {
			if _, err := conn.WriteTo(f, bcast); err != nil {
				return fmt.Errorf("announce %s: send gratuitous ARP: %w", name, err)
			}
		}
	}
	return nil
}

// waitOperUp waits until link name, seen through h, is operationally up
// (the kernel has processed its carrier: eth0's queue is active, the
// bridge port forwards).
func waitOperUp(ctx context.Context, h *netlink.Handle, name string) (netlink.Link, error) {
	deadline := time.Now().Add(linkUpWait)
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("look up %s: %w", name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is not up after %s (%s)", name, linkUpWait, l.Attrs().OperState)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arpAnnouncement is the ARP payload (no Ethernet header) of a gratuitous
// ARP request: sender and target address both ip, sender hardware address
// mac, target hardware address zero (RFC 5227's ARP announcement, what
// Linux sends with arp_notify).
func arpAnnouncement(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)             // hardware type: Ethernet
	binary.BigEndian.PutUint16(b[2:], unix.ETH_P_IP) // protocol type: IPv4
	b[4], b[5] = 6, 4                                // address lengths
	binary.BigEndian.PutUint16(b[6:], 1)             // operation: request
	copy(b[8:14], mac)
	a := ip.As4()
	copy(b[14:18], a[:])
	copy(b[24:28], a[:])
	return b
}

// errNotAnnouncement says a frame is not a gratuitous ARP.
var errNotAnnouncement = errors.New("not a gratuitous ARP")

// ParseAnnouncement returns the sender of a gratuitous ARP (a request or
// reply whose sender and target protocol addresses are the same IPv4
// address) given as its ARP payload.
func ParseAnnouncement(b []byte) (net.HardwareAddr, netip.Addr, error) {
	if len(b) < 28 || binary.BigEndian.Uint16(b[0:]) != 1 || binary.BigEndian.Uint16(b[2:]) != unix.ETH_P_IP || b[4] != 6 || b[5] != 4 {
		return nil, netip.Addr{}, errNotAnnouncement
	}
	if op := binary.BigEndian.Uint16(b[6:]); op != 1 && op != 2 {
		return nil, netip.Addr{}, errNotAnnouncement
	}
	spa, tpa := netip.AddrFrom4([4]byte(b[14:18])), netip.AddrFrom4([4]byte(b[24:28]))
	if spa != tpa {
		return nil, netip.Addr{}, errNotAnnouncement
	}
	return net.HardwareAddr(b[8:14]), spa, nil
}

// forgetUnresolved drops the neighbour entries the container began to
// resolve while its link was down (a restored task answering a request
// that was queued before the freeze): their ARP request was lost, and the
// kernel would retry only after retrans_time (1 s), holding the answers
// back that long. Without the entry, the next packet resolves at once.
func forgetUnresolved(h *netlink.Handle, link netlink.Link) {
	neighs, err := h.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		return
	}
	for i := range neighs {
		if neighs[i].State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
			_ = h.NeighDel(&neighs[i])
		}
	}
}
