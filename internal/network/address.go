package network

import (
	"fmt"
	"net/netip"
)

// maxSubnetBits is the longest prefix that still leaves one container address:
// a /30 holds network, gateway, one container and broadcast.
const maxSubnetBits = 30

// subnetLayout holds the reserved addresses of an IPv4 subnet.
type subnetLayout struct {
	prefix    netip.Prefix // masked
	network   netip.Addr
	gateway   netip.Addr
	broadcast netip.Addr
}

// layout validates subnet and computes its reserved addresses. A prefix that
// is not masked (10.0.0.7/24) is taken as its network (10.0.0.0/24).
func layout(subnet netip.Prefix) (subnetLayout, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return subnetLayout{}, fmt.Errorf("%w: %s is not an IPv4 prefix", ErrInvalidSubnet, subnet)
	}
	if subnet.Bits() > maxSubnetBits {
		return subnetLayout{}, fmt.Errorf("%w: %s leaves no container address (need /%d or shorter)",
			ErrInvalidSubnet, subnet, maxSubnetBits)
	}
	p := subnet.Masked()
	network := p.Addr()
	b := network.As4()
	hostBits := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= uint32(1)<<hostBits - 1
	broadcast := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return subnetLayout{
		prefix:    p,
		network:   network,
		gateway:   network.Next(),
		broadcast: broadcast,
	}, nil
}

// checkHost reports whether addr is a container address of the subnet: inside
// it and neither network, gateway nor broadcast address.
func (l subnetLayout) checkHost(addr netip.Addr) error {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid() || !addr.Is4() || !l.prefix.Contains(addr):
		return fmt.Errorf("%w: %s is not in %s", ErrAddressOutside, addr, l.prefix)
	case addr == l.network:
		return fmt.Errorf("%w: %s is the network address of %s", ErrAddressOutside, addr, l.prefix)
	case addr == l.broadcast:
		return fmt.Errorf("%w: %s is the broadcast address of %s", ErrAddressOutside, addr, l.prefix)
	case addr == l.gateway:
		return fmt.Errorf("%w: %s is the gateway of %s", ErrAddressInUse, addr, l.prefix)
	}
	return nil
}

// usedSet indexes addresses in use; IPv4-mapped IPv6 forms count as IPv4.
func usedSet(used []netip.Addr) map[netip.Addr]struct{} {
	set := make(map[netip.Addr]struct{}, len(used))
	for _, a := range used {
		set[a.Unmap()] = struct{}{}
	}
	return set
}

// Allocate returns the lowest container address of subnet that is not in
// used. The network address, the gateway (first host address) and the
// broadcast address are never returned. It returns ErrSubnetFull when every
// container address is taken and ErrInvalidSubnet for a subnet that is not
// IPv4 or is longer than /30.
func Allocate(subnet netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	l, err := layout(subnet)
	if err != nil {
		return netip.Addr{}, err
	}
	taken := usedSet(used)
	// Each step either returns or passes an address in taken, so this loop
	// runs at most len(used)+1 times before it finds a hole.
	for a := l.gateway.Next(); a != l.broadcast; a = a.Next() {
		if _, ok := taken[a]; !ok {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: %s", ErrSubnetFull, l.prefix)
}

// allocateIn is Allocate restricted to the addresses of pool.
func allocateIn(l subnetLayout, pool netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	taken := usedSet(used)
	for a := pool.Addr(); pool.Contains(a); a = a.Next() {
		if l.checkHost(a) != nil {
			continue
		}
		if _, ok := taken[a]; !ok {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: pool %s", ErrSubnetFull, pool)
}

// CheckAddress reports whether a caller may give addr to a container. It
// returns ErrAddressOutside when addr is not in subnet or is its network or
// broadcast address, ErrAddressInUse when addr is the gateway or is in used,
// and ErrInvalidSubnet for a subnet that Allocate would refuse.
func CheckAddress(subnet netip.Prefix, addr netip.Addr, used []netip.Addr) error {
	l, err := layout(subnet)
	if err != nil {
		return err
	}
	if err := l.checkHost(addr); err != nil {
		return err
	}
	if _, ok := usedSet(used)[addr.Unmap()]; ok {
		return fmt.Errorf("%w: %s", ErrAddressInUse, addr.Unmap())
	}
	return nil
}
