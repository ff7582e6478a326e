package network

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"
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
