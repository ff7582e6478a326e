package network

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestHostVethName(t *testing.T) {
	a := HostVethName("vesselbr0", "web")
	if a != HostVethName("vesselbr0", "web") {
		t.Fatal("HostVethName is not deterministic")
	}
	if !strings.HasPrefix(a, "vsl") || len(a) != 11 {
		t.Fatalf("HostVethName = %q, want vsl + 8 hex digits", a)
	}
	if err := validIfName(a); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 300)
	if n := HostVethName("vesselbr0", long); len(n) > maxIfNameLen {
		t.Fatalf("HostVethName for a long name = %q, longer than %d", n, maxIfNameLen)
	}
	seen := map[string]string{}
	for _, pair := range [][2]string{{"vesselbr0", "web"}, {"vesselbr1", "web"}, {"vesselbr0", "db"}, {"vesselbr0/web", ""}} {
		n := HostVethName(pair[0], pair[1])
		if prev, dup := seen[n]; dup {
			t.Fatalf("HostVethName%v = %q, same as for %s", pair, n, prev)
		}
		seen[n] = strings.Join(pair[:], ",")
	}
}

func TestMACFor(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"10.250.3.7", "0a:58:0a:fa:03:07"},
		{"::ffff:10.250.3.7", "0a:58:0a:fa:03:07"},
		{"192.168.0.255", "0a:58:c0:a8:00:ff"},
	}
	for _, tt := range tests {
		got := MACFor(netip.MustParseAddr(tt.addr))
		if got != tt.want {
			t.Errorf("MACFor(%s) = %s, want %s", tt.addr, got, tt.want)
		}
		hw, err := net.ParseMAC(got)
		if err != nil {
			t.Fatal(err)
		}
		if hw[0]&0x02 == 0 || hw[0]&0x01 != 0 {
			t.Errorf("MACFor(%s) = %s is not a locally administered unicast address", tt.addr, got)
		}
	}
}

func TestValidContainerName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b"} {
		if err := validContainerName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("validContainerName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	for _, ok := range []string{"web", "web-1.example", "..x"} {
		if err := validContainerName(ok); err != nil {
			t.Errorf("validContainerName(%q) = %v", ok, err)
		}
	}
}
