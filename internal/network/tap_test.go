package network

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAttachTap: a VM's tap is a persistent, up port of the bridge with
// the port name and MAC a veth would have; attaching again rebuilds it;
// Detach removes it (and its filter).
func TestAttachTap(t *testing.T) {
	e := setupEnv(t)
	ctx := context.Background()
	addr, err := Allocate(e.m.Subnet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.track("vm1")
	for range 2 {
		ep, err := e.m.AttachTap(ctx, "vm1", addr)
		if err != nil {
			t.Fatal(err)
		}
		if ep.HostVeth != HostVethName(e.m.cfg.Bridge, "vm1") || ep.MAC != MACFor(addr) || ep.Netns != "" ||
			ep.Address.Addr() != addr || ep.Gateway != e.m.Gateway() {
			t.Fatalf("endpoint %+v", ep)
		}
		l, err := netlink.LinkByName(ep.HostVeth)
		if err != nil {
			t.Fatal(err)
		}
		tap, ok := l.(*netlink.Tuntap)
		if !ok || tap.Mode != netlink.TUNTAP_MODE_TAP || tap.NonPersist {
			t.Fatalf("link %s is %T %+v, want a persistent tap", ep.HostVeth, l, l)
		}
		br, err := netlink.LinkByName(e.m.cfg.Bridge)
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().MasterIndex != br.Attrs().Index || l.Attrs().Flags&0x1 == 0 {
			t.Errorf("tap master %d (bridge %d), flags %v", l.Attrs().MasterIndex, br.Attrs().Index, l.Attrs().Flags)
		}
	}
	if err := e.m.Guard(ctx, "vm1", addr); err != nil {
		t.Errorf("Guard of a tap: %v", err)
	}
	if err := e.m.Detach(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(HostVethName(e.m.cfg.Bridge, "vm1")); !isLinkNotFound(err) {
		t.Errorf("tap after Detach: %v", err)
	}
}

// TestClaimMAC: a VM's MAC the bridge learnt behind another port (the
// uplink, while the VM ran on another host) is forwarded to the VM's tap
// once claimed, as a dynamic entry (one the bridge ages and moves again
// when the MAC shows up elsewhere), not a static one; a port of another
// bridge is refused.
func TestClaimMAC(t *testing.T) {
	e := setupEnv(t)
	ctx := context.Background()
	a, err := Allocate(e.m.Subnet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Allocate(e.m.Subnet(), []netip.Addr{a})
	if err != nil {
		t.Fatal(err)
	}
	e.track("vm1")
	e.track("vm2")
	vm1, err := e.m.AttachTap(ctx, "vm1", a)
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := e.m.AttachTap(ctx, "vm2", b)
	if err != nil {
		t.Fatal(err)
	}
	// A bridge takes forwarding entries on a port that forwards only:
	// the taps' carrier comes up as QEMU would open them.
	openTap(t, vm1.HostVeth)
	openTap(t, vm2.HostVeth)
	mac, _ := net.ParseMAC(vm1.MAC)
	port := func(name string) netlink.Link {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// What the bridge learnt while the VM was elsewhere: vm1's MAC
	// behind another port.
	stale := &netlink.Neigh{LinkIndex: port(vm2.HostVeth).Attrs().Index, Family: unix.AF_BRIDGE,
		Flags: netlink.NTF_MASTER, State: netlink.NUD_REACHABLE, HardwareAddr: mac}
	if err := netlink.NeighAdd(stale); err != nil {
		t.Fatal(err)
	}
	entry := func() (string, int) {
		t.Helper()
		ns, err := netlink.NeighList(0, unix.AF_BRIDGE)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.HardwareAddr.String() == mac.String() && n.MasterIndex == port(e.m.cfg.Bridge).Attrs().Index {
				l, err := netlink.LinkByIndex(n.LinkIndex)
				if err != nil {
					t.Fatal(err)
				}
				return l.Attrs().Name, n.State
			}
		}
		return "", 0
	}
	if at, _ := entry(); at != vm2.HostVeth {
		t.Fatalf("the stale entry is on %q, want %s", at, vm2.HostVeth)
	}
	if err := ClaimMAC(e.m.cfg.Bridge, vm1.HostVeth, mac); err != nil {
		t.Fatal(err)
	}
	at, st := entry()
	if at != vm1.HostVeth {
		t.Fatalf("%s forwarded to %q after ClaimMAC, want %s", mac, at, vm1.HostVeth)
	}
	if st&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
		t.Errorf("the claimed entry is static (state %#x)", st)
	}
	if err := ClaimMAC("lo", vm1.HostVeth, mac); err == nil {
		t.Error("ClaimMAC on a port of another bridge succeeded")
	}
}

// openTap attaches to the persistent tap name as QEMU does (its carrier
// comes up) until the test ends.
func openTap(t *testing.T, name string) {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		t.Fatalf("attach to tap %s: %v", name, err)
	}
}
