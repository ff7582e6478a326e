package integration

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/testhost"
)

// TestLiveMoveAnnounces moves a container back and forth and checks, from
// a client on the segment, that the host it arrives on announces it with
// gratuitous ARP at the MAC it had before (the MAC moves with it), and
// that the segment's bridge then forwards its MAC to the new host's port.
func TestLiveMoveAnnounces(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:ga")
	ip := netip.MustParseAddr(instanceOn(t, c, "alpha:ga").IPv4)
	mac := strings.TrimSpace(c.OK("exec", "alpha:ga", "--", "cat", "/sys/class/net/eth0/address"))
	uplinks := map[string]string{"alpha": c.Spec().Links[1], "beta": c.Spec().Links[3]}

	arps := captureAnnouncements(t, c)
	for _, hop := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}} {
		from, to := hop[0], hop[1]
		c.OK("move", from+":ga", to+":", "--live", "--memory", api.MemoryCopy)
		if got := strings.TrimSpace(c.OK("exec", to+":ga", "--", "cat", "/sys/class/net/eth0/address")); got != mac {
			t.Fatalf("eth0's MAC on %s is %s, was %s before the move", to, got, mac)
		}
		waitAnnouncement(t, arps, ip, mac, to)
		eventually(t, "the segment forwarding "+mac+" to "+to, func() bool {
			out, _ := exec.Command("bridge", "fdb", "show", "br", c.Spec().Segment).Output()
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, mac+" ") {
					return strings.Contains(l, " dev "+uplinks[to]+" ")
				}
			}
			return false
		})
	}
}

type announcement struct {
	mac net.HardwareAddr
	ip  netip.Addr
}

// captureAnnouncements listens for ARP on the client's eth0 until the test
// ends and passes on every gratuitous ARP it sees.
func captureAnnouncements(t *testing.T, c *testhost.Cluster) <-chan announcement {
	t.Helper()
	var conn *packet.Conn
	err := c.InClient(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Datagram, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capture ARP in the client's netns: %v", err)
	}
	ch := make(chan announcement, 64)
	done := make(chan error, 1)
	var closing atomic.Bool
	t.Cleanup(func() {
		closing.Store(true)
		conn.Close()
		if err := <-done; err != nil {
			t.Errorf("capture ARP in the client's netns: %v", err)
		}
	})
	go func() {
		b := make([]byte, 1500)
		for {
			n, _, err := conn.ReadFrom(b)
			if err != nil {
				if closing.Load() {
					err = nil
				}
				done <- err
				return
			}
			if mac, ip, err := network.ParseAnnouncement(b[:n]); err == nil {
				select {
				case ch <- announcement{mac: append(net.HardwareAddr{}, mac...), ip: ip}:
				default:
				}
			}
		}
	}()
	return ch
}

// waitAnnouncement waits for a gratuitous ARP of ip at mac (the capture
// started before the move; nothing but the arrival sends one).
func waitAnnouncement(t *testing.T, arps <-chan announcement, ip netip.Addr, mac, host string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case a := <-arps:
			if a.ip == ip && a.mac.String() == mac {
				// Drain the repeats, so the next move needs its own.
				drain := time.After(time.Second)
				for {
					select {
					case <-arps:
					case <-drain:
						return
					}
				}
			}
		case <-timeout:
			t.Fatalf("no gratuitous ARP for %s at %s seen by the client after the move to %s", ip, mac, host)
		}
	}
}
