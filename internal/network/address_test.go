package network

import (
	"errors"
	"net/netip"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestAllocate(t *testing.T) {
	tests := []struct {
		name   string
		subnet string
		used   []netip.Addr
		want   string
		err    error
	}{
		{"empty subnet gets first after gateway", "10.87.0.0/24", nil, "10.87.0.2", nil},
		{"skips used", "10.87.0.0/24", addrs("10.87.0.2", "10.87.0.3"), "10.87.0.4", nil},
		{"fills a hole", "10.87.0.0/24", addrs("10.87.0.2", "10.87.0.4"), "10.87.0.3", nil},
		{"gateway in used changes nothing", "10.87.0.0/24", addrs("10.87.0.1"), "10.87.0.2", nil},
		{"addresses outside are ignored", "10.87.0.0/24", addrs("10.88.0.2", "192.168.1.1"), "10.87.0.2", nil},
		{"ipv4-mapped used counts", "10.87.0.0/24", addrs("::ffff:10.87.0.2"), "10.87.0.3", nil},
		{"unmasked subnet", "10.87.0.77/24", nil, "10.87.0.2", nil},
		{"crosses an octet in a /16", "10.87.0.0/16", rangeAddrs("10.87.0.2", 254), "10.87.1.0", nil},
		{"/30 has one address", "10.87.0.0/30", nil, "10.87.0.2", nil},
		{"/30 full", "10.87.0.0/30", addrs("10.87.0.2"), "", ErrSubnetFull},
		{"/24 full skips broadcast", "10.87.0.0/24", rangeAddrs("10.87.0.2", 253), "", ErrSubnetFull},
		{"/24 last address", "10.87.0.0/24", rangeAddrs("10.87.0.2", 252), "10.87.0.254", nil},
		{"/31 has no room", "10.87.0.0/31", nil, "", ErrInvalidSubnet},
		{"/32 has no room", "10.87.0.1/32", nil, "", ErrInvalidSubnet},
		{"ipv6 refused", "fd00::/64", nil, "", ErrInvalidSubnet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Allocate(netip.MustParsePrefix(tt.subnet), tt.used)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Allocate = %v, %v; want error %v", got, err, tt.err)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("Allocate = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestAllocateInvalidPrefix(t *testing.T) {
	if _, err := Allocate(netip.Prefix{}, nil); !errors.Is(err, ErrInvalidSubnet) {
		t.Fatalf("Allocate(zero prefix) error = %v, want ErrInvalidSubnet", err)
	}
}

// rangeAddrs returns n consecutive addresses from first.
func rangeAddrs(first string, n int) []netip.Addr {
	a := netip.MustParseAddr(first)
	out := make([]netip.Addr, 0, n)
	for range n {
		out = append(out, a)
		a = a.Next()
	}
	return out
}

func TestCheckAddress(t *testing.T) {
	const subnet = "10.87.0.0/24"
	tests := []struct {
		name string
		addr netip.Addr
		used []netip.Addr
		err  error
	}{
		{"free host address", netip.MustParseAddr("10.87.0.9"), nil, nil},
		{"last host address", netip.MustParseAddr("10.87.0.254"), nil, nil},
		{"ipv4-mapped form", netip.MustParseAddr("::ffff:10.87.0.9"), nil, nil},
		{"used", netip.MustParseAddr("10.87.0.9"), addrs("10.87.0.9"), ErrAddressInUse},
		{"used in mapped form", netip.MustParseAddr("10.87.0.9"), addrs("::ffff:10.87.0.9"), ErrAddressInUse},
		{"gateway", netip.MustParseAddr("10.87.0.1"), nil, ErrAddressInUse},
		{"network address", netip.MustParseAddr("10.87.0.0"), nil, ErrAddressOutside},
		{"broadcast", netip.MustParseAddr("10.87.0.255"), nil, ErrAddressOutside},
		{"other subnet", netip.MustParseAddr("10.87.1.9"), nil, ErrAddressOutside},
		{"ipv6", netip.MustParseAddr("fd00::9"), nil, ErrAddressOutside},
		{"zero address", netip.Addr{}, nil, ErrAddressOutside},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAddress(netip.MustParsePrefix(subnet), tt.addr, tt.used)
			if tt.err == nil && err != nil || !errors.Is(err, tt.err) {
				t.Fatalf("CheckAddress(%v) = %v, want %v", tt.addr, err, tt.err)
			}
		})
	}
	if err := CheckAddress(netip.MustParsePrefix("10.0.0.0/31"), netip.MustParseAddr("10.0.0.1"), nil); !errors.Is(err, ErrInvalidSubnet) {
		t.Fatalf("CheckAddress on /31 = %v, want ErrInvalidSubnet", err)
	}
}

// TestAllocateAgreesWithCheck allocates a whole /28 and checks each result.
func TestAllocateAgreesWithCheck(t *testing.T) {
	subnet := netip.MustParsePrefix("10.87.0.16/28")
	var used []netip.Addr
	for {
		a, err := Allocate(subnet, used)
		if errors.Is(err, ErrSubnetFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckAddress(subnet, a, used); err != nil {
			t.Fatalf("Allocate gave %v, CheckAddress says %v", a, err)
		}
		used = append(used, a)
	}
	if len(used) != 13 { // 16 - network - gateway - broadcast
		t.Fatalf("allocated %d addresses in a /28, want 13", len(used))
	}
}

func TestManagerAllocatePool(t *testing.T) {
	m, err := New(Config{Bridge: "vtpool0", Subnet: netip.MustParsePrefix("10.88.0.0/24"), NetnsDir: "/run/x",
		Pool: netip.MustParsePrefix("10.88.0.128/25")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Allocate(addrs("10.88.0.128"))
	if err != nil || got != netip.MustParseAddr("10.88.0.129") {
		t.Fatalf("Allocate = %v, %v", got, err)
	}
	// The pool's last usable address skips the subnet's broadcast.
	full := rangeAddrs("10.88.0.128", 127)
	if _, err := m.Allocate(full); !errors.Is(err, ErrSubnetFull) {
		t.Fatalf("full pool: %v", err)
	}
	// Addresses outside the pool are still acceptable when given.
	if err := m.CheckAddress(netip.MustParseAddr("10.88.0.5"), nil); err != nil {
		t.Fatalf("CheckAddress outside pool: %v", err)
	}
	// The gateway's pool: .0/25 skips network and gateway.
	m2, _ := New(Config{Bridge: "vtpool1", Subnet: netip.MustParsePrefix("10.88.0.0/24"), NetnsDir: "/run/x",
		Pool: netip.MustParsePrefix("10.88.0.0/25")})
	if got, _ := m2.Allocate(nil); got != netip.MustParseAddr("10.88.0.2") {
		t.Fatalf("low pool first = %v", got)
	}
	for _, bad := range []Config{
		{Bridge: "b", Subnet: netip.MustParsePrefix("10.88.0.0/24"), NetnsDir: "/x", Pool: netip.MustParsePrefix("10.89.0.0/25")},
		{Bridge: "b", Subnet: netip.MustParsePrefix("10.88.0.0/24"), NetnsDir: "/x", Pool: netip.MustParsePrefix("10.88.0.0/16")},
		{Bridge: "b", Subnet: netip.MustParsePrefix("10.88.0.0/24"), NetnsDir: "/x", ExternalGateway: true, NAT: true},
	} {
		if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v", bad, err)
		}
	}
}
