package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// setupEnv is newTestEnv followed by Setup.
func setupEnv(t *testing.T) *testEnv {
	t.Helper()
	e := newTestEnv(t, true)
	if err := e.m.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAttachConnects(t *testing.T) {
	e := setupEnv(t)
	a := e.attach("a", nil)
	b := e.attach("b", []netip.Addr{a.Address.Addr()})

	want := Endpoint{
		Netns:    e.m.NetnsPath("a"),
		HostVeth: HostVethName(e.m.cfg.Bridge, "a"),
		Address:  netip.PrefixFrom(e.m.Gateway().Next(), 24),
		Gateway:  e.m.Gateway(),
		MAC:      MACFor(e.m.Gateway().Next()),
	}
	if a != want {
		t.Errorf("Attach(a) = %+v, want %+v", a, want)
	}
	if a.Address == b.Address {
		t.Fatalf("a and b share %s", a.Address)
	}
	for _, ep := range []Endpoint{a, b} {
		checkHostVeth(t, e, ep)
		checkContainerSide(t, ep)
	}
	if !e.m.Exists("a") || !e.m.Exists("b") {
		t.Error("Exists = false for an attached container")
	}

	nsPing(t, a.Netns, b.Address.Addr())
	nsPing(t, a.Netns, e.m.Gateway())
	nsPing(t, b.Netns, a.Address.Addr())
}

// checkHostVeth checks that ep's host end is an up port of the bridge.
func checkHostVeth(t *testing.T, e *testEnv, ep Endpoint) {
	t.Helper()
	br, err := netlink.LinkByName(e.m.cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName(ep.HostVeth)
	if err != nil {
		t.Fatalf("host veth: %v", err)
	}
	if l.Type() != "veth" || l.Attrs().MasterIndex != br.Attrs().Index || l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("host veth %s: type %s, master %d, flags %v; want an up veth on bridge %d",
			ep.HostVeth, l.Type(), l.Attrs().MasterIndex, l.Attrs().Flags, br.Attrs().Index)
	}
}

// checkContainerSide checks eth0's MAC and address, lo, and the default
// route inside ep's netns.
func checkContainerSide(t *testing.T, ep Endpoint) {
	t.Helper()
	ns, err := netns.GetFromPath(ep.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 {
		t.Errorf("netns has %d links, want lo and eth0", len(links))
	}
	lo, err := h.LinkByName("lo")
	if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("lo: %v, %v; want up", lo, err)
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if got := eth0.Attrs().HardwareAddr.String(); got != ep.MAC {
		t.Errorf("eth0 mac = %s, want %s", got, ep.MAC)
	}
	if eth0.Attrs().Flags&net.FlagUp == 0 {
		t.Error("eth0 is down")
	}
	as, err := h.AddrList(eth0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].IPNet.String() != ep.Address.String() {
		t.Errorf("eth0 addresses %v, want just %s", as, ep.Address)
	}
	routes, err := h.RouteList(eth0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var def bool
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(ep.Gateway.AsSlice()) {
			def = true
		}
	}
	if !def {
		t.Errorf("no default route via %s in %v", ep.Gateway, routes)
	}
}

func TestDetach(t *testing.T) {
	e := setupEnv(t)
	ctx := context.Background()
	ep := e.attach("c1", nil)
	for i := range 2 {
		if err := e.m.Detach(ctx, "c1"); err != nil {
			t.Fatalf("Detach #%d: %v", i+1, err)
		}
	}
	if _, err := netlink.LinkByName(ep.HostVeth); !isLinkNotFound(err) {
		t.Errorf("host veth after Detach: %v, want not found", err)
	}
	if _, err := os.Stat(ep.Netns); !os.IsNotExist(err) {
		t.Errorf("netns file after Detach: %v, want it removed", err)
	}
	if e.m.Exists("c1") {
		t.Error("Exists = true after Detach")
	}
	if err := e.m.Detach(ctx, "never-attached"); err != nil {
		t.Errorf("Detach of an unknown name: %v", err)
	}
}

func TestDetachWhileNetnsHeld(t *testing.T) {
	e := setupEnv(t)
	ep := e.attach("c1", nil)
	// An open fd holds the namespace, as a container's processes would.
	held, err := netns.GetFromPath(ep.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := e.m.Detach(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ep.Netns); !os.IsNotExist(err) {
		t.Errorf("netns file after Detach: %v, want it removed", err)
	}
	if _, err := netlink.LinkByName(ep.HostVeth); !isLinkNotFound(err) {
		t.Errorf("host veth after Detach: %v, want not found", err)
	}
}

func TestAttachAgainRebuilds(t *testing.T) {
	e := setupEnv(t)
	first := e.attach("c1", nil)
	// Attach again, at another address, without Detach.
	second := e.attach("c1", []netip.Addr{first.Address.Addr()})
	if first.Address == second.Address {
		t.Fatal("test needs two addresses")
	}
	checkHostVeth(t, e, second)
	checkContainerSide(t, second)
	other := e.attach("c2", []netip.Addr{first.Address.Addr(), second.Address.Addr()})
	nsPing(t, other.Netns, second.Address.Addr())
}

func TestAttachAfterCrash(t *testing.T) {
	e := setupEnv(t)
	name := "crashed"
	e.track(name)
	hostVeth := HostVethName(e.m.cfg.Bridge, name)
	// A crash after creating the netns file but before mounting it, and
	// after creating the veth pair but before moving its peer.
	if err := os.WriteFile(e.m.NetnsPath(name), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	la := netlink.NewLinkAttrs()
	la.Name = hostVeth
	leftover := netlink.NewVeth(la)
	leftover.PeerName = "vsltmp" + hostVeth[3:]
	if err := netlink.LinkAdd(leftover); err != nil {
		t.Fatal(err)
	}
	if e.m.Exists(name) {
		t.Error("Exists = true for an unmounted netns file")
	}

	ep := e.attach(name, nil)
	checkHostVeth(t, e, ep)
	checkContainerSide(t, ep)
	if _, err := netlink.LinkByName(leftover.PeerName); !isLinkNotFound(err) {
		t.Errorf("leftover peer %s: %v, want it gone", leftover.PeerName, err)
	}
	nsPing(t, ep.Netns, e.m.Gateway())
}

func TestAttachRevertsOnFailure(t *testing.T) {
	e := setupEnv(t)
	e.track("c1")
	// A veth cannot have this MTU, so Attach fails after making the netns.
	e.m.cfg.MTU = 70000
	_, err := e.m.Attach(context.Background(), "c1", e.m.Gateway().Next())
	if err == nil {
		t.Fatal("Attach with an impossible MTU succeeded")
	}
	t.Logf("Attach failed as expected: %v", err)
	if _, err := os.Stat(e.m.NetnsPath("c1")); !os.IsNotExist(err) {
		t.Errorf("netns file after failed Attach: %v, want it removed", err)
	}
	if _, err := netlink.LinkByName(HostVethName(e.m.cfg.Bridge, "c1")); !isLinkNotFound(err) {
		t.Errorf("host veth after failed Attach: %v, want not found", err)
	}
	if m := mountsUnder(t, e.dir); len(m) != 1 {
		t.Errorf("mounts under netns dir after failed Attach: %v, want just the dir", m)
	}

	e.m.cfg.MTU = defaultMTU
	ep := e.attach("c1", nil)
	checkContainerSide(t, ep)
}

func TestAttachRejects(t *testing.T) {
	e := newTestEnv(t, false)
	ctx := context.Background()
	host := e.m.Gateway().Next()
	if _, err := e.m.Attach(ctx, "c1", host); !errors.Is(err, ErrNoBridge) {
		t.Errorf("Attach before Setup = %v, want ErrNoBridge", err)
	}
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr netip.Addr
		want error
	}{
		{"../x", host, ErrInvalidName},
		{"", host, ErrInvalidName},
		{"c1", e.m.Gateway(), ErrAddressInUse},
		{"c1", e.m.Subnet().Addr(), ErrAddressOutside},
		{"c1", netip.MustParseAddr("192.0.2.1"), ErrAddressOutside},
	}
	for _, tt := range tests {
		if _, err := e.m.Attach(ctx, tt.name, tt.addr); !errors.Is(err, tt.want) {
			t.Errorf("Attach(%q, %s) = %v, want %v", tt.name, tt.addr, err, tt.want)
		}
	}
	if entries, _ := os.ReadDir(e.dir); len(entries) != 0 {
		t.Errorf("refused Attach left files: %v", entries)
	}
	if err := e.m.Detach(ctx, "../x"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Detach(../x) = %v, want ErrInvalidName", err)
	}
}

// TestAttachLeavesThreadsAlone checks that no thread of the process is left
// in a container's namespace after Attach builds several.
func TestAttachLeavesThreadsAlone(t *testing.T) {
	e := setupEnv(t)
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var used []netip.Addr
	for _, name := range []string{"t1", "t2", "t3", "t4"} {
		used = append(used, e.attach(name, used).Address.Addr())
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread ended
		}
		if ns != hostNS {
			t.Errorf("thread %s is in %s, not the host's %s", task.Name(), ns, hostNS)
		}
	}
}

// TestNetnsOwnSocketTables checks that a container's namespace has TCP and
// UDP tables of its own (the kernel shows a shared table's size as
// negative) and the host's table-derived TCP limits.
func TestNetnsOwnSocketTables(t *testing.T) {
	e := setupEnv(t)
	a := e.attach("a", nil)
	host, err := readNetSysctls("net/ipv4/tcp_max_tw_buckets", "net/ipv4/tcp_max_syn_backlog")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	err = onThreadIn(func() error {
		h, err := netns.GetFromPath(a.Netns)
		if err != nil {
			return err
		}
		defer h.Close()
		return netns.Set(h)
	}, func() error {
		var err error
		got, err = readNetSysctls("net/ipv4/tcp_ehash_entries", "net/ipv4/udp_hash_entries",
			"net/ipv4/tcp_max_tw_buckets", "net/ipv4/tcp_max_syn_backlog")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"net/ipv4/tcp_ehash_entries":   strconv.Itoa(netnsTCPEhashEntries),
		"net/ipv4/udp_hash_entries":    strconv.Itoa(netnsUDPHashEntries),
		"net/ipv4/tcp_max_tw_buckets":  host["net/ipv4/tcp_max_tw_buckets"],
		"net/ipv4/tcp_max_syn_backlog": host["net/ipv4/tcp_max_syn_backlog"],
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s in the container's netns = %q, want %q", k, got[k], v)
		}
	}
}
