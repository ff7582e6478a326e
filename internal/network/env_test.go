package network

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// testEnv is one test's network: a Manager on a bridge and subnet of its
// own, with a NetnsDir under t.TempDir(). Its cleanup removes everything the
// test may have left and then checks that nothing is left.
type testEnv struct {
	t     *testing.T
	m     *Manager
	dir   string
	names []string // container names the test may have attached
}

// newTestEnv makes a Manager with a random bridge name and a /24 in
// 10.250.0.0/16 that no host address or route overlaps. It does not run
// Setup. Kernel tests need root, nsenter and busybox (scripts/setup.sh
// installs them): a missing prerequisite fails the test.
func newTestEnv(t *testing.T, nat bool) *testEnv {
	t.Helper()
	testutil.NeedRoot(t)
	for _, tool := range []string{"iptables", "nsenter", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("kernel tests need %s: %v", tool, err)
		}
	}
	dir := t.TempDir() + "/netns"
	cfg := Config{
		Bridge:   fmt.Sprintf("vtst%06x", rand.IntN(1<<24)),
		Subnet:   freeSubnet(t),
		NetnsDir: dir,
		NAT:      nat,
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, m: m, dir: dir}
	t.Cleanup(e.cleanup)
	return e
}

// freeSubnet picks a random 10.250.X.0/24 that no address or route on the
// host overlaps (other tests, other engineers' bridges).
func freeSubnet(t *testing.T) netip.Prefix {
	t.Helper()
	var taken []netip.Prefix
	as, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.IPNet.String()); err == nil {
			taken = append(taken, p.Masked())
		}
	}
	rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Dst != nil {
			if p, err := netip.ParsePrefix(r.Dst.String()); err == nil && p.Bits() > 0 {
				taken = append(taken, p)
			}
		}
	}
	for range 100 {
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, byte(rand.IntN(256)), 0}), 24)
		if !slices.ContainsFunc(taken, cand.Overlaps) {
			return cand
		}
	}
	t.Fatal("no free /24 in 10.250.0.0/16")
	return netip.Prefix{}
}

// track records a container name for cleanup.
func (e *testEnv) track(name string) {
	if !slices.Contains(e.names, name) {
		e.names = append(e.names, name)
	}
}

// attach attaches name at the next free address and fails the test on error.
func (e *testEnv) attach(name string, used []netip.Addr) Endpoint {
	e.t.Helper()
	addr, err := Allocate(e.m.Subnet(), used)
	if err != nil {
		e.t.Fatal(err)
	}
	e.track(name)
	ep, err := e.m.Attach(context.Background(), name, addr)
	if err != nil {
		e.t.Fatalf("Attach(%s, %s): %v", name, addr, err)
	}
	return ep
}

// cleanup detaches every tracked container, tears the network down,
// unmounts whatever is still mounted under the netns dir, and then checks
// that no link, rule or mount of this test is left on the host.
func (e *testEnv) cleanup() {
	t, ctx := e.t, context.Background()
	if entries, err := os.ReadDir(e.dir); err == nil {
		for _, ent := range entries {
			e.track(ent.Name())
		}
	}
	for _, name := range e.names {
		if err := e.m.Detach(ctx, name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	if err := e.m.Teardown(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, mnt := range mountsUnder(t, e.dir) {
		t.Errorf("cleanup: %s still mounted; unmounting", mnt)
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	}

	links := []string{e.m.cfg.Bridge}
	for _, name := range e.names {
		links = append(links, HostVethName(e.m.cfg.Bridge, name))
	}
	for _, l := range links {
		if _, err := netlink.LinkByName(l); err == nil {
			t.Errorf("cleanup: link %s still exists", l)
		}
	}
	if filterTableExists(t, e.m.cfg.Bridge) {
		t.Errorf("cleanup: nftables table bridge %s left", filterTableName(e.m.cfg.Bridge))
	}
	if n := countRules(t, e.m.natComment()); n != 0 {
		t.Errorf("cleanup: %d iptables rules tagged %s left", n, e.m.natComment())
	}
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var mps []string
	for _, i := range infos {
		mps = append(mps, i.Mountpoint)
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	return mps
}

// countRules counts rules mentioning comment in iptables -S and
// iptables -t nat -S, read with the iptables binary, not our wrapper.
func countRules(t *testing.T, comment string) int {
	t.Helper()
	n := 0
	for _, table := range []string{"filter", "nat"} {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v: %s", table, err, out)
		}
		n += strings.Count(string(out), `"`+comment+`"`)
	}
	return n
}

// nsPing pings addr once from inside the netns file nsPath.
func nsPing(t *testing.T, nsPath string, addr netip.Addr) {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+nsPath, "busybox", "ping", "-c1", "-W2", addr.String()).CombinedOutput()
	if err != nil {
		t.Errorf("ping %s from %s: %v\n%s", addr, nsPath, err, out)
	}
}
