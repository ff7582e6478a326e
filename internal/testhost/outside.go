package testhost

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/network"
)

// Outside is a network namespace beyond a test host: a veth pair from the
// machine's own namespace, HostAddr/30 on the machine's end and Addr/30 on
// the outside's, and routes via the machine to the subnets given. It is
// what a container reaches through NAT, or what reaches a container
// through the host's filters. The test's cleanup removes it.
type Outside struct {
	t        T
	NS       string
	Addr     string
	HostAddr string
}

// NewOutside makes an Outside. tag (a few letters) names its namespace and
// links, so that two tests' outsides do not collide; hostAddr and addr are
// the two ends of a /30.
func NewOutside(t T, tag, hostAddr, addr string, routes ...netip.Prefix) *Outside {
	t.Helper()
	id := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	ns, hostIf, extIf := tag+"ext"+id, tag+"xh"+id, tag+"xe"+id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", extIf)
	ip("link", "set", extIf, "netns", ns)
	ip("addr", "add", hostAddr+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", addr+"/30", "dev", extIf)
	ip("-n", ns, "link", "set", extIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	for _, r := range routes {
		ip("-n", ns, "route", "add", r.String(), "via", hostAddr)
	}
	return &Outside{t: t, NS: ns, Addr: addr, HostAddr: hostAddr}
}

// Dial connects from the outside; the timeout only bounds a hang.
func (o *Outside) Dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := network.InNamed(o.NS, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 30*time.Second)
		return err
	})
	return c, err
}

// Listen opens a TCP listener on the outside's address, closed at the
// test's end.
func (o *Outside) Listen(port string) net.Listener {
	o.t.Helper()
	var ln net.Listener
	if err := network.InNamed(o.NS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(o.Addr, port))
		return err
	}); err != nil {
		o.t.Fatalf("listen outside: %v", err)
	}
	o.t.Cleanup(func() { ln.Close() })
	return ln
}
