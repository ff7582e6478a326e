package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/vishvananda/netlink"
)

func TestNewValidates(t *testing.T) {
	good := Config{Bridge: "vesselbr0", Subnet: netip.MustParsePrefix("10.87.0.0/24"), NetnsDir: "/run/vessel/netns"}
	tests := []struct {
		name   string
		modify func(*Config)
	}{
		{"empty bridge", func(c *Config) { c.Bridge = "" }},
		{"bridge of 16 bytes", func(c *Config) { c.Bridge = "abcdefghijklmnop" }},
		{"bridge with slash", func(c *Config) { c.Bridge = "br/0" }},
		{"bridge with space", func(c *Config) { c.Bridge = "br 0" }},
		{"bridge with colon", func(c *Config) { c.Bridge = "br:0" }},
		{"bridge dot dot", func(c *Config) { c.Bridge = ".." }},
		{"zero subnet", func(c *Config) { c.Subnet = netip.Prefix{} }},
		{"ipv6 subnet", func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/64") }},
		{"subnet /31", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.87.0.0/31") }},
		{"relative netns dir", func(c *Config) { c.NetnsDir = "run/netns" }},
		{"empty netns dir", func(c *Config) { c.NetnsDir = "" }},
		{"mtu too small", func(c *Config) { c.MTU = 67 }},
		{"mtu too big", func(c *Config) { c.MTU = 65536 }},
		{"negative mtu", func(c *Config) { c.MTU = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.modify(&cfg)
			if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New error = %v, want ErrInvalidConfig", err)
			}
		})
	}

	cfg := good
	cfg.Bridge = "abcdefghijklmno" // 15 bytes is fine
	cfg.Subnet = netip.MustParsePrefix("10.87.0.77/24")
	cfg.NetnsDir = "/run/vessel//netns/"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subnet() != netip.MustParsePrefix("10.87.0.0/24") {
		t.Errorf("Subnet = %v, want 10.87.0.0/24", m.Subnet())
	}
	if m.Gateway() != netip.MustParseAddr("10.87.0.1") {
		t.Errorf("Gateway = %v, want 10.87.0.1", m.Gateway())
	}
	if p := m.NetnsPath("web"); p != "/run/vessel/netns/web" {
		t.Errorf("NetnsPath = %q", p)
	}
	if m.cfg.MTU != defaultMTU {
		t.Errorf("MTU = %d, want %d", m.cfg.MTU, defaultMTU)
	}
}

func TestSetupIdempotent(t *testing.T) {
	e := newTestEnv(t, true)
	ctx := context.Background()
	for i := range 2 {
		if err := e.m.Setup(ctx); err != nil {
			t.Fatalf("Setup #%d: %v", i+1, err)
		}
	}

	br, err := netlink.LinkByName(e.m.cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if br.Type() != "bridge" || br.Attrs().Flags&net.FlagUp == 0 || br.Attrs().MTU != 1500 {
		t.Errorf("bridge: type %s, flags %v, mtu %d; want an up bridge with mtu 1500",
			br.Type(), br.Attrs().Flags, br.Attrs().MTU)
	}
	as, err := netlink.AddrList(br, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	want := e.m.Gateway().String() + "/24"
	if len(as) != 1 || as[0].IPNet.String() != want {
		t.Errorf("bridge addresses %v, want just %s", as, want)
	}

	if n := countRules(t, e.m.natComment()); n != 4 {
		t.Errorf("%d rules tagged %s after two Setups, want 4", n, e.m.natComment())
	}
	fwd, err := os.ReadFile(ipForwardPath)
	if err != nil || strings.TrimSpace(string(fwd)) != "1" {
		t.Errorf("ip_forward = %q, %v; want 1", fwd, err)
	}
	mounted, err := mountinfo.Mounted(e.dir)
	if err != nil || !mounted {
		t.Errorf("netns dir mounted = %v, %v; want a bind mount", mounted, err)
	}
	if got := len(mountsUnder(t, e.dir)); got != 1 {
		t.Errorf("%d mounts on the netns dir after two Setups, want 1", got)
	}
}

func TestSetupWithoutNATRemovesRules(t *testing.T) {
	e := newTestEnv(t, true)
	ctx := context.Background()
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.m.cfg.NAT = false
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRules(t, e.m.natComment()); n != 0 {
		t.Errorf("%d rules tagged %s after Setup without NAT, want 0", n, e.m.natComment())
	}
}

func TestTeardown(t *testing.T) {
	e := newTestEnv(t, true)
	ctx := context.Background()
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.attach("c1", nil)
	if err := e.m.Detach(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := e.m.Teardown(ctx); err != nil {
			t.Fatalf("Teardown #%d: %v", i+1, err)
		}
	}
	if _, err := netlink.LinkByName(e.m.cfg.Bridge); !isLinkNotFound(err) {
		t.Errorf("bridge after Teardown: %v, want not found", err)
	}
	if n := countRules(t, e.m.natComment()); n != 0 {
		t.Errorf("%d rules tagged %s after Teardown", n, e.m.natComment())
	}
	if _, err := os.Stat(e.dir); !os.IsNotExist(err) {
		t.Errorf("netns dir after Teardown: %v, want it removed", err)
	}
	if m := mountsUnder(t, e.dir); len(m) != 0 {
		t.Errorf("mounts left after Teardown: %v", m)
	}
}

func TestTeardownKeepsDirInUse(t *testing.T) {
	e := newTestEnv(t, false)
	ctx := context.Background()
	if err := e.m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.attach("c1", nil)
	if err := e.m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.m.Exists("c1") {
		t.Error("Teardown removed a netns that was still attached")
	}
	// The env's cleanup detaches c1 and tears down again.
}

// TestSetupReplacesOlderForwardRules: an older vessel's unconditional
// "-o BRIDGE -j ACCEPT" (inbound connections to containers bypassing the
// host firewall) is gone after Setup, and the FORWARD rules are in order.
func TestSetupReplacesOlderForwardRules(t *testing.T) {
	e := newTestEnv(t, true)
	ctx := context.Background()
	legacy := []string{"-w", "-I", "FORWARD", "1", "-o", e.m.cfg.Bridge, "-m", "comment", "--comment", e.m.natComment(), "-j", "ACCEPT"}
	if out, err := exec.Command("iptables", legacy...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %v: %v: %s", legacy, err, out)
	}
	for i := range 2 {
		if err := e.m.Setup(ctx); err != nil {
			t.Fatalf("Setup #%d: %v", i+1, err)
		}
	}
	current, err := e.m.ipt.List(ctx, listOpts{Chain: "FORWARD"})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, r := range current {
		if hasComment(r.Spec, e.m.natComment()) {
			got = append(got, r.Spec)
		}
	}
	var want [][]string
	for _, r := range e.m.forwardRules() {
		want = append(want, r.Spec)
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("FORWARD rules after Setup:\n%q\nwant\n%q", got, want)
	}
}
