package network

import (
	"net"
	"net/netip"
	"testing"
)

func TestARPAnnouncement(t *testing.T) {
	mac, _ := net.ParseMAC(MACFor(netip.MustParseAddr("10.1.2.3")))
	b := arpAnnouncement(mac, netip.MustParseAddr("10.1.2.3"))
	want := []byte{0, 1, 8, 0, 6, 4, 0, 1, 0x0a, 0x58, 10, 1, 2, 3, 10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 10, 1, 2, 3}
	if string(b) != string(want) {
		t.Fatalf("announcement\n got % x\nwant % x", b, want)
	}
	gotMAC, gotIP, err := ParseAnnouncement(b)
	if err != nil || gotMAC.String() != mac.String() || gotIP != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("ParseAnnouncement = %v %v %v", gotMAC, gotIP, err)
	}
	// An ordinary request (who has the gateway?) is not an announcement.
	req := append([]byte{}, b...)
	copy(req[24:], []byte{10, 1, 2, 1})
	if _, _, err := ParseAnnouncement(req); err == nil {
		t.Fatal("a request for another address parsed as an announcement")
	}
	if _, _, err := ParseAnnouncement(b[:20]); err == nil {
		t.Fatal("a short frame parsed as an announcement")
	}
}
