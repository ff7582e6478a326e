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
//   - NAT: outbound masquerading of the subnet through the host (iptables),
//     tagged with a comment naming the bridge so Teardown removes exactly the
//     rules this manager added.
//
// Address allocation is pure logic (Allocate): the caller passes the addresses
// already in use (from its state store) and persists the result.
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
)
