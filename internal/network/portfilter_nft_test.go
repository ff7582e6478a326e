package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/vesselhost/vessel/internal/testutil"
)

// kernelPorts lists the ports with a filter in the kernel's table.
func kernelPorts(t *testing.T, m *Manager) []string {
	t.Helper()
	c, err := dialNFT()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := m.filters.ports(c)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	return ports
}

// filterTableExists reports whether the bridge's table is in the kernel.
func filterTableExists(t *testing.T, bridge string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == filterTableName(bridge) })
}

// TestPortFilterKernelLifecycle: with the real nf_tables, Attach installs a
// port's filter and honest traffic passes it; Detach removes it; Setup
// prunes the filter of a port whose veth vanished behind its back;
// re-attaching and Guard work; Teardown deletes the table.
func TestPortFilterKernelLifecycle(t *testing.T) {
	e := newTestEnv(t, false)
	ctx := context.Background()
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	a := e.attach("a", nil)
	b := e.attach("b", []netip.Addr{a.Address.Addr()})
	if got, want := kernelPorts(t, e.m), sortedStrings(a.HostVeth, b.HostVeth); !slices.Equal(got, want) {
		t.Fatalf("filtered ports = %q, want %q", got, want)
	}
	nsPing(t, a.Netns, b.Address.Addr())
	nsPing(t, a.Netns, e.m.Gateway())

	if err := e.m.Detach(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := kernelPorts(t, e.m); !slices.Equal(got, []string{a.HostVeth}) {
		t.Fatalf("filtered ports after detach = %q, want %q", got, a.HostVeth)
	}

	// a's veth goes away without Detach (a crash, an admin): the next
	// Setup drops its filter.
	if l, err := netlink.LinkByName(a.HostVeth); err != nil {
		t.Fatal(err)
	} else if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kernelPorts(t, e.m); len(got) != 0 {
		t.Fatalf("filtered ports after setup = %q, want none", got)
	}

	a = e.attach("a", nil)
	if err := e.m.Guard(ctx, "a", a.Address.Addr()); err != nil {
		t.Fatal(err)
	}
	if got := kernelPorts(t, e.m); !slices.Equal(got, []string{a.HostVeth}) {
		t.Fatalf("filtered ports after re-attach and guard = %q, want %q", got, a.HostVeth)
	}
	nsPing(t, a.Netns, e.m.Gateway())

	if err := e.m.Detach(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if filterTableExists(t, e.m.cfg.Bridge) {
		t.Error("teardown left the port filter table")
	}
}

// TestPortFilterKernelStopsARPSpoofing: container a claims b's address with
// gratuitous ARP. Filtered, the host's neighbour entry for b keeps b's MAC;
// with a's filter removed, the same attack rewrites it to a's MAC (the
// attack is real, and it is the filter that stops it).
func TestPortFilterKernelStopsARPSpoofing(t *testing.T) {
	e := newTestEnv(t, false)
	ctx := context.Background()
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	a := e.attach("a", nil)
	b := e.attach("b", []netip.Addr{a.Address.Addr()})
	bIP := b.Address.Addr()
	inA := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=" + a.Netns, "busybox"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("in a: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The host learns b's MAC.
	if out, err := exec.Command("busybox", "ping", "-c1", "-W2", bIP.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping b from the host: %v\n%s", err, out)
	}
	inA("ip", "addr", "add", bIP.String()+"/32", "dev", "eth0")
	attack := func() string {
		t.Helper()
		inA("arping", "-U", "-c", "1", "-I", "eth0", bIP.String())
		// Barrier: a round trip through the same port after the ARP frame.
		inA("ping", "-c1", "-W2", "-I", a.Address.Addr().String(), e.m.Gateway().String())
		return hostNeighbour(t, e.m.cfg.Bridge, bIP)
	}
	if got := attack(); got != b.MAC {
		t.Fatalf("filtered: the host's entry for %s is %s, want b's %s", bIP, got, b.MAC)
	}
	if err := e.m.filters.remove(a.HostVeth); err != nil {
		t.Fatal(err)
	}
	if got := attack(); got != a.MAC {
		t.Errorf("unfiltered: the host's entry for %s is %s; the attack did not take (want a's %s): the test proves nothing", bIP, got, a.MAC)
	}
}

// hostNeighbour returns the MAC of the host's neighbour entry for ip on the
// bridge ("" if none).
func hostNeighbour(t *testing.T, bridge string, ip netip.Addr) string {
	t.Helper()
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatal(err)
	}
	neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighs {
		if n.IP.Equal(net.IP(ip.AsSlice())) {
			return n.HardwareAddr.String()
		}
	}
	return ""
}

func sortedStrings(s ...string) []string {
	slices.Sort(s)
	return s
}

// BenchmarkPortFilterInstall measures the install of a new port's filter,
// the cost Attach adds (on a migration target, before the source freezes).
func BenchmarkPortFilterInstall(b *testing.B) {
	testutil.NeedRoot(b)
	f := portFilters{bridge: "vbench0", dial: dialNFT}
	defer func() {
		if err := f.destroy(); err != nil {
			b.Error(err)
		}
	}()
	if err := f.ensure(); err != nil {
		b.Fatal(err)
	}
	ip := netip.MustParseAddr("10.250.0.2")
	mac, _ := net.ParseMAC(MACFor(ip))
	i := 0
	for b.Loop() {
		if err := f.install(fmt.Sprintf("vslb%d", i), mac, ip); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
