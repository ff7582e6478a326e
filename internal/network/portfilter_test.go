package network

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables/expr"
)

// Frames for the filter tests.

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// ethFrame builds an Ethernet frame.
func ethFrame(src net.HardwareAddr, etherType uint16, payload []byte) []byte {
	f := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src...)
	f = binary.BigEndian.AppendUint16(f, etherType)
	return append(f, payload...)
}

// arpPacket builds an ARP request for Ethernet/IPv4.
func arpPacket(sha net.HardwareAddr, spa, tpa netip.Addr) []byte {
	p := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	p = append(p, sha...)
	p = append(p, spa.AsSlice()...)
	p = append(p, make([]byte, 6)...)
	return append(p, tpa.AsSlice()...)
}

// ipv4Packet builds a minimal IPv4 header (UDP, no payload).
func ipv4Packet(src, dst netip.Addr) []byte {
	p := []byte{0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0}
	p = append(p, src.AsSlice()...)
	return append(p, dst.AsSlice()...)
}

// filterFixture is a bridge's filters on a fake nf_tables with two
// attached ports.
type filterFixture struct {
	fake           *fakeNFT
	f              portFilters
	gw, ipA, ipB   netip.Addr
	macA, macB     net.HardwareAddr
	portA, portB   string
	bridgeMAC, mac net.HardwareAddr // the gateway's, a stranger's
}

func newFilterFixture(t *testing.T) *filterFixture {
	t.Helper()
	x := &filterFixture{fake: newFakeNFT(),
		gw: netip.MustParseAddr("10.87.0.1"), ipA: netip.MustParseAddr("10.87.0.2"), ipB: netip.MustParseAddr("10.87.0.3"),
		portA: HostVethName("br0", "a"), portB: HostVethName("br0", "b"),
		bridgeMAC: mustMAC("02:00:00:00:00:01"), mac: mustMAC("0a:58:de:ad:be:ef")}
	x.macA, x.macB = mustMAC(MACFor(x.ipA)), mustMAC(MACFor(x.ipB))
	x.f = portFilters{bridge: "br0", dial: x.fake.dial}
	if err := x.f.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := x.f.install(x.portA, x.macA, x.ipA); err != nil {
		t.Fatal(err)
	}
	if err := x.f.install(x.portB, x.macB, x.ipB); err != nil {
		t.Fatal(err)
	}
	return x
}

func (x *filterFixture) verdict(port string, frame []byte) expr.VerdictKind {
	return x.fake.evaluate(filterTableName("br0"), port, frame)
}

func verdictName(v expr.VerdictKind) string {
	switch v {
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictDrop:
		return "drop"
	}
	return "other"
}

// TestPortFilterVerdicts: a port passes its container's own IPv4 and ARP and
// drops every spoofing attempt; the uplink is not filtered.
func TestPortFilterVerdicts(t *testing.T) {
	x := newFilterFixture(t)
	vlan := binary.BigEndian.AppendUint16([]byte{0, 1}, etherTypeIPv4)
	vlan = append(vlan, ipv4Packet(x.ipA, x.gw)...)
	badHlen := arpPacket(x.macA, x.ipA, x.gw)
	badHlen[4] = 7
	tests := []struct {
		name  string
		port  string
		frame []byte
		want  expr.VerdictKind
	}{
		{"own ipv4", x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.ipA, x.gw)), expr.VerdictAccept},
		{"own arp", x.portA, ethFrame(x.macA, etherTypeARP, arpPacket(x.macA, x.ipA, x.gw)), expr.VerdictAccept},
		{"other port's own ipv4", x.portB, ethFrame(x.macB, etherTypeIPv4, ipv4Packet(x.ipB, x.ipA)), expr.VerdictAccept},
		{"neighbour's ip", x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.ipB, x.gw)), expr.VerdictDrop},
		{"gateway's ip", x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.gw, x.ipB)), expr.VerdictDrop},
		{"unassigned ip", x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(netip.MustParseAddr("10.87.0.99"), x.gw)), expr.VerdictDrop},
		{"other mac", x.portA, ethFrame(x.mac, etherTypeIPv4, ipv4Packet(x.ipA, x.gw)), expr.VerdictDrop},
		{"neighbour's mac", x.portA, ethFrame(x.macB, etherTypeIPv4, ipv4Packet(x.ipB, x.gw)), expr.VerdictDrop},
		{"arp claiming the gateway", x.portA, ethFrame(x.macA, etherTypeARP, arpPacket(x.macA, x.gw, x.gw)), expr.VerdictDrop},
		{"arp claiming the neighbour", x.portA, ethFrame(x.macA, etherTypeARP, arpPacket(x.macA, x.ipB, x.ipB)), expr.VerdictDrop},
		{"arp with another sender mac", x.portA, ethFrame(x.macA, etherTypeARP, arpPacket(x.bridgeMAC, x.ipA, x.gw)), expr.VerdictDrop},
		{"arp with odd lengths", x.portA, ethFrame(x.macA, etherTypeARP, badHlen), expr.VerdictDrop},
		{"truncated arp", x.portA, ethFrame(x.macA, etherTypeARP, arpPacket(x.macA, x.ipA, x.gw)[:16]), expr.VerdictDrop},
		{"ipv6", x.portA, ethFrame(x.macA, 0x86dd, make([]byte, 40)), expr.VerdictDrop},
		{"vlan-tagged", x.portA, ethFrame(x.macA, 0x8100, vlan), expr.VerdictDrop},
		{"stp", x.portA, ethFrame(x.macA, 0x0026, make([]byte, 38)), expr.VerdictDrop},
		{"uplink", "uplink0", ethFrame(x.mac, etherTypeIPv4, ipv4Packet(x.gw, x.ipA)), expr.VerdictAccept},
	}
	for _, tt := range tests {
		if got := x.verdict(tt.port, tt.frame); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, verdictName(got), verdictName(tt.want))
		}
	}
}

// TestPortFilterInstallIdempotent: installing again (a restarted daemon, a
// re-attach) leaves one element and one chain per port and one dispatch
// rule; installing with another address replaces the old one.
func TestPortFilterInstallIdempotent(t *testing.T) {
	x := newFilterFixture(t)
	for range 2 {
		if err := x.f.ensure(); err != nil {
			t.Fatal(err)
		}
		if err := x.f.install(x.portA, x.macA, x.ipA); err != nil {
			t.Fatal(err)
		}
	}
	tbl := x.fake.state.tables[filterTableName("br0")]
	if n := len(tbl.chains[baseChainName].rules); n != 1 {
		t.Errorf("base chain has %d rules, want 1", n)
	}
	if n := len(tbl.sets[portsMap]); n != 2 {
		t.Errorf("map has %d elements, want 2", n)
	}
	if n := len(tbl.chains[portChainName(x.portA)].rules); n != len(portRules(x.macA, x.ipA)) {
		t.Errorf("port chain has %d rules, want %d", n, len(portRules(x.macA, x.ipA)))
	}

	// In place already: nothing is sent (deleting rules is what costs).
	before := x.fake.flushes
	if err := x.f.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := x.f.install(x.portA, x.macA, x.ipA); err != nil {
		t.Fatal(err)
	}
	if x.fake.flushes != before {
		t.Errorf("re-installing an unchanged filter sent %d batch(es)", x.fake.flushes-before)
	}
	// A base chain someone emptied is repaired, by install too.
	tbl.chains[baseChainName].rules = nil
	if err := x.f.install(x.portA, x.macA, x.ipA); err != nil {
		t.Fatal(err)
	}
	if v := x.verdict(x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.gw, x.ipB))); v != expr.VerdictDrop {
		t.Errorf("spoofed frame after repair: %s", verdictName(v))
	}

	moved := netip.MustParseAddr("10.87.0.7")
	movedMAC := mustMAC(MACFor(moved))
	if err := x.f.install(x.portA, movedMAC, moved); err != nil {
		t.Fatal(err)
	}
	if v := x.verdict(x.portA, ethFrame(movedMAC, etherTypeIPv4, ipv4Packet(moved, x.gw))); v != expr.VerdictAccept {
		t.Errorf("new address: %s", verdictName(v))
	}
	if v := x.verdict(x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.ipA, x.gw))); v != expr.VerdictDrop {
		t.Errorf("old address after re-install: %s", verdictName(v))
	}
}

// TestPortFilterInstallCreatesTable: install works on a host where Setup
// has not made the table (or someone flushed the ruleset).
func TestPortFilterInstallCreatesTable(t *testing.T) {
	fake := newFakeNFT()
	f := portFilters{bridge: "br0", dial: fake.dial}
	ip := netip.MustParseAddr("10.87.0.2")
	if err := f.install("vslport", mustMAC(MACFor(ip)), ip); err != nil {
		t.Fatal(err)
	}
	if v := fake.evaluate(filterTableName("br0"), "vslport", ethFrame(mustMAC(MACFor(ip)), etherTypeIPv4, ipv4Packet(netip.MustParseAddr("10.87.0.1"), ip))); v != expr.VerdictDrop {
		t.Errorf("spoofed frame: %s", verdictName(v))
	}
}

// TestPortFilterRemove: removing a port's filter removes its element and
// chain in one batch and leaves the other port's; removing a port without
// a filter does nothing.
func TestPortFilterRemove(t *testing.T) {
	x := newFilterFixture(t)
	if err := x.f.remove(x.portA); err != nil {
		t.Fatal(err)
	}
	ports, err := x.f.ports(x.fake)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ports, []string{x.portB}) {
		t.Errorf("ports after remove = %q, want %q", ports, x.portB)
	}
	if n := len(x.fake.state.tables[filterTableName("br0")].sets[portsMap]); n != 1 {
		t.Errorf("map has %d elements, want 1", n)
	}
	before := x.fake.flushes
	if err := x.f.remove(x.portA); err != nil {
		t.Errorf("second remove: %v", err)
	}
	if x.fake.flushes != before {
		t.Error("removing an absent filter sent a batch")
	}
	if v := x.verdict(x.portB, ethFrame(x.macB, etherTypeIPv4, ipv4Packet(x.gw, x.ipA))); v != expr.VerdictDrop {
		t.Errorf("other port after remove: %s", verdictName(v))
	}
}

// TestPortFilterPrune: prune drops the filters of ports keep rejects (their
// veth is gone) and only those, and ignores other bridges' tables.
func TestPortFilterPrune(t *testing.T) {
	x := newFilterFixture(t)
	other := portFilters{bridge: "br1", dial: x.fake.dial}
	if err := other.install(x.portA, x.macA, x.ipA); err != nil {
		t.Fatal(err)
	}
	if err := x.f.prune(func(p string) bool { return p == x.portB }); err != nil {
		t.Fatal(err)
	}
	if ports, _ := x.f.ports(x.fake); !slices.Equal(ports, []string{x.portB}) {
		t.Errorf("ports after prune = %q, want %q", ports, x.portB)
	}
	if ports, _ := other.ports(x.fake); !slices.Equal(ports, []string{x.portA}) {
		t.Errorf("other bridge's ports after prune = %q, want %q", ports, x.portA)
	}
}

// TestPortFilterDestroy: destroy deletes the table; again it is a no-op.
func TestPortFilterDestroy(t *testing.T) {
	x := newFilterFixture(t)
	for range 2 {
		if err := x.f.destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := x.fake.state.tables[filterTableName("br0")]; ok {
		t.Error("table still exists")
	}
}

// TestPortFilterFailedBatch: a batch the kernel refuses changes nothing and
// its error names the port.
func TestPortFilterFailedBatch(t *testing.T) {
	x := newFilterFixture(t)
	x.fake.failing = errors.New("netlink receive: no buffer space available")
	moved := netip.MustParseAddr("10.87.0.7")
	err := x.f.install(x.portA, mustMAC(MACFor(moved)), moved)
	if err == nil || !errors.Is(err, x.fake.failing) {
		t.Fatalf("install = %v, want the flush error", err)
	}
	x.fake.failing = nil
	if v := x.verdict(x.portA, ethFrame(x.macA, etherTypeIPv4, ipv4Packet(x.ipA, x.gw))); v != expr.VerdictAccept {
		t.Errorf("old filter after failed install: %s", verdictName(v))
	}
}

func TestPortOfChain(t *testing.T) {
	for chain, want := range map[string]string{"port-vsl0011aabb": "vsl0011aabb", "prerouting": "", "port-": ""} {
		got, ok := portOfChain(chain)
		if got != want || ok != (want != "") {
			t.Errorf("portOfChain(%q) = %q, %v", chain, got, ok)
		}
	}
}
