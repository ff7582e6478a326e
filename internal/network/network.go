// Package network gives containers their own network stack on a host bridge.
//
// Vocabulary:
//
//   - Bridge: one Linux bridge per daemon (default "vesselbr0") holding the
//     subnet's gateway address; containers' host-side veth ends are its ports.
//   - Netns: a container's network namespace, created by this package as a
//     bind-mounted nsfs file under Config.NetnsDir/NAME before the container
//     starts (the OCI spec joins it by path). It lives until Detach, so it
//     survives daemon restarts and can be pre-built on a migration target.
//   - Endpoint: a container's attachment: a veth pair whose host end is on the
//     bridge and whose container end is "eth0" inside the netns, configured
//     with the container's address and a default route via the gateway.
//   - Port filter: the anti-spoofing rules of one port (portfilter.go): the
//     bridge takes from a container's port only frames from its MAC, IPv4
//     from its address and ARP claiming its address at its MAC. They live in
//     the nftables table "vessel-BRIDGE" (bridge family).
//   - NAT: outbound masquerading of the subnet through the host (iptables),
//     with FORWARD rules that let containers out and only answers in,
//     tagged with a comment naming the bridge so Teardown removes exactly the
//     rules this manager added.
//
// Address allocation is pure logic (Allocate): the caller passes the addresses
// already in use (from its state store) and persists the result.
//
// A Manager's methods build and remove kernel objects; the caller serializes
// calls for the same container name, and does not run Setup or Teardown
// concurrently with Attach. Calls for different names may run concurrently.
package network

import (
	"errors"
	"net/netip"
)

// Config configures one daemon's network.
type Config struct {
	// Bridge is the host bridge's name (at most 15 bytes).
	Bridge string
	// Subnet is the containers' IPv4 subnet; the gateway takes its first
	// host address (e.g. 10.87.0.1 in 10.87.0.0/24).
	Subnet netip.Prefix
	// NetnsDir is where per-container netns files are bind-mounted.
	NetnsDir string
	// NAT enables outbound masquerading for the subnet.
	NAT bool
	// MTU of the bridge and veths; 0 means 1500.
	MTU int
	// Pool, if valid, is the part of Subnet this host allocates new
	// addresses from (hosts sharing one L2 segment and subnet take disjoint
	// pools). Addresses outside the pool but inside Subnet may still be
	// given explicitly (a migrated container keeps its address).
	Pool netip.Prefix
	// Uplink, if set, is an existing interface enslaved to the bridge: the
	// L2 link to other hosts on the same segment.
	Uplink string
	// ExternalGateway says the gateway address belongs to a router on the
	// uplink's segment, not to this host: the bridge gets no address (and NAT
	// makes no sense).
	ExternalGateway bool
}

// Endpoint is a container's attachment to the bridge.
type Endpoint struct {
	// Netns is the path of the container's network namespace file.
	Netns string `json:"netns"`
	// HostVeth is the name of the host-side veth (a bridge port).
	HostVeth string `json:"host_veth"`
	// Address is the container's IPv4 address with the subnet's prefix length.
	Address netip.Prefix `json:"address"`
	// Gateway is the bridge's address, the container's default route.
	Gateway netip.Addr `json:"gateway"`
	// MAC is eth0's hardware address (derived from the address, so it moves
	// with the container).
	MAC string `json:"mac"`
}

// Errors.
var (
	// ErrSubnetFull says no address is left in the subnet.
	ErrSubnetFull = errors.New("no free address left in subnet")
	// ErrAddressInUse says a requested address is taken.
	ErrAddressInUse = errors.New("address already in use")
	// ErrAddressOutside says a requested address is not a host address of the subnet.
	ErrAddressOutside = errors.New("address outside the subnet")
	// ErrInvalidSubnet says a subnet is not an IPv4 prefix with room for at
	// least one container besides the gateway.
	ErrInvalidSubnet = errors.New("invalid subnet")
	// ErrInvalidConfig says a Config cannot be used; the message names the field.
	ErrInvalidConfig = errors.New("invalid network config")
	// ErrInvalidName says a container name cannot name a netns file.
	ErrInvalidName = errors.New("invalid container name")
	// ErrNotBridge says a link with the bridge's name exists but is not a bridge.
	ErrNotBridge = errors.New("link exists and is not a bridge")
	// ErrNoBridge says the bridge does not exist (Setup has not run).
	ErrNoBridge = errors.New("bridge does not exist")
)
