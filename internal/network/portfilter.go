package network

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Port filters: anti-spoofing on the bridge's container ports.
//
// Each bridge has one nftables table of the bridge family, "vessel-BRIDGE":
//
//	table bridge vessel-BRIDGE {
//		map ports { type ifname : verdict }   # host veth -> jump port-VETH
//		chain prerouting {
//			type filter hook prerouting priority -300; policy accept;
//			iifname vmap @ports
//		}
//		chain port-VETH {                      # one per attached container
//			ether saddr != MAC drop
//			ether type arp  arp htype 1 ptype ip hlen 6 plen 4  arp saddr ether MAC  arp saddr ip IP  accept
//			ether type ip  ip saddr IP  accept
//			drop
//		}
//	}
//
// A frame a container sends enters the bridge through its host veth, so
// the prerouting hook sees it whether it is bridged to another port or
// delivered to the host (the gateway). The port chain lets through only
// what carries the container's own MAC and IPv4 address: IPv4 from its
// address and ARP whose sender fields are its MAC and address. Everything
// else is dropped: frames from another MAC, IPv4 from another address (a
// neighbour's, the gateway's), ARP claiming another address (a poisoning
// attempt), IPv6 (vessel gives containers no IPv6, so router
// advertisements and neighbour discovery from a container are spoofing by
// definition), VLAN-tagged frames and any other ethertype (STP BPDUs, say).
// Frames from an uplink are not filtered: the other hosts filter their own
// ports.
//
// A port's map element and chain are added and removed together in one
// netlink batch (atomic in the kernel), before its veth exists and after it
// is gone, so a port is never on the bridge unfiltered. Ports whose veth no
// longer exists are pruned when the daemon starts.

// portChainPrefix starts the name of a port's chain.
const portChainPrefix = "port-"

// portsMap is the name of the verdict map from host veth to port chain.
const portsMap = "ports"

// baseChainName is the name of the table's base chain.
const baseChainName = "prerouting"

// Ethertypes and ARP constants the port chain matches on.
const (
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
)

// Offsets in the Ethernet header (link-layer base) and in the IPv4 and ARP
// headers (network base).
const (
	ethSrcOffset   = 6
	ethTypeOffset  = 12
	ipv4SrcOffset  = 12
	arpFixedOffset = 0 // htype(2) ptype(2) hlen(1) plen(1)
	arpSHAOffset   = 8
	arpSPAOffset   = 14
)

// arpFixedIPv4 is the fixed part of an ARP header for Ethernet/IPv4:
// htype 1, ptype 0x0800, hlen 6, plen 4. Checking it first makes the
// sender fields' offsets valid.
var arpFixedIPv4 = []byte{0x00, 0x01, 0x08, 0x00, 6, 4}

// portFilterPriority runs the port chains before anything else on the
// bridge (the bridge family's filter priority is -200): a spoofed frame is
// dropped before any other table sees it.
var portFilterPriority = nftables.ChainPriorityRef(-300)

// filterTableName is the nftables table of a bridge's port filters.
func filterTableName(bridge string) string { return "vessel-" + bridge }

// portChainName is the chain of a host veth.
func portChainName(port string) string { return portChainPrefix + port }

// portOfChain returns the host veth a chain filters, and false for a
// chain that is not a port chain.
func portOfChain(chain string) (string, bool) {
	port, ok := strings.CutPrefix(chain, portChainPrefix)
	if !ok || port == "" {
		return "", false
	}
	return port, true
}

// ifnameKey is an interface name as nftables compares it: IFNAMSIZ bytes,
// NUL-padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// filterTable returns the table object of a bridge's port filters.
func filterTable(bridge string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyBridge, Name: filterTableName(bridge)}
}

// portsSet returns the verdict map of table.
func portsSet(t *nftables.Table) *nftables.Set {
	// A fixed ID: within a batch that creates the map, rules and elements
	// find it by that ID; nftables would otherwise draw one from a package
	// counter that concurrent connections race on.
	return &nftables.Set{Table: t, Name: portsMap, ID: 1, IsMap: true,
		KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// baseChain returns the prerouting base chain of table.
func baseChain(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: t, Name: baseChainName, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: portFilterPriority, Policy: &accept}
}

// portChain returns the (regular) chain of a host veth.
func portChain(t *nftables.Table, port string) *nftables.Chain {
	return &nftables.Chain{Table: t, Name: portChainName(port)}
}

// portElement is the map element sending port's frames to its chain.
func portElement(port string) nftables.SetElement {
	return nftables.SetElement{Key: ifnameKey(port),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: portChainName(port)}}
}

// dispatchRule is the base chain's one rule: iifname vmap @ports. A frame
// from a port without an element (the uplink) goes on unfiltered.
func dispatchRule(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: set.Name, SetID: set.ID},
	}
}

// portRules returns the rules of a port chain for a container with the
// given MAC and IPv4 address (see the table above), in order.
func portRules(mac net.HardwareAddr, ip netip.Addr) [][]expr.Any {
	ip4 := ip.Unmap().As4()
	etherType := func(t uint16) []expr.Any {
		v := make([]byte, 2)
		binary.BigEndian.PutUint16(v, t)
		return match(expr.PayloadBaseLLHeader, ethTypeOffset, v, expr.CmpOpEq)
	}
	var rules [][]expr.Any
	// Any frame from another MAC: dropped.
	rules = append(rules, slices.Concat(
		match(expr.PayloadBaseLLHeader, ethSrcOffset, mac, expr.CmpOpNeq),
		verdict(expr.VerdictDrop)))
	// ARP for Ethernet/IPv4 whose sender is this container.
	rules = append(rules, slices.Concat(
		etherType(etherTypeARP),
		match(expr.PayloadBaseNetworkHeader, arpFixedOffset, arpFixedIPv4, expr.CmpOpEq),
		match(expr.PayloadBaseNetworkHeader, arpSHAOffset, mac, expr.CmpOpEq),
		match(expr.PayloadBaseNetworkHeader, arpSPAOffset, ip4[:], expr.CmpOpEq),
		verdict(expr.VerdictAccept)))
	// IPv4 from this container's address.
	rules = append(rules, slices.Concat(
		etherType(etherTypeIPv4),
		match(expr.PayloadBaseNetworkHeader, ipv4SrcOffset, ip4[:], expr.CmpOpEq),
		verdict(expr.VerdictAccept)))
	// Everything else.
	rules = append(rules, verdict(expr.VerdictDrop))
	return rules
}

// match loads len(value) bytes at offset of base into register 1 and
// compares them with value.
func match(base expr.PayloadBase, offset int, value []byte, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: base, Offset: uint32(offset), Len: uint32(len(value))},
		&expr.Cmp{Op: op, Register: 1, Data: append([]byte(nil), value...)},
	}
}

// verdict is a rule's final statement.
func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
