package security

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/testhost"
)

// The network attacks: a tenant's container, root inside with
// CAP_NET_ADMIN and CAP_NET_RAW over its own network namespace, tries to
// pass for a neighbour or the gateway on the bridge; and a machine outside
// the host tries to connect to a container. Attacks that need those
// capabilities run in containers that have them (privileged ones: the
// bridge's filters must hold whatever the container may do inside).

// probePort is the UDP port the spoofing tests send to.
const probePort = "9999"

// spoofNet is a host with two containers, a and b, each with netprobe.
type spoofNet struct {
	*host
	gw, ipA, ipB netip.Addr
	macA, macB   string
	bridgeMAC    string
	portA        string
}

func newSpoofNet(t *testing.T) *spoofNet {
	h := newHost(t)
	probe := filepath.Join(t.TempDir(), "netprobe")
	if err := testhost.BuildNetprobe(probe); err != nil {
		t.Fatal(err)
	}
	s := &spoofNet{host: h, gw: h.Subnet().Addr().Next()}
	// The attacker needs CAP_NET_ADMIN over its network namespace: only a
	// privileged container has it (TestUnprivilegedNetworkFixed). The
	// bridge filters must hold for those too.
	for _, name := range []string{"a", "b"} {
		h.OK("launch", "busybox", name, "-c", "security.privileged=true")
		h.Install(name, probe)
	}
	s.ipA, s.ipB = s.address("a"), s.address("b")
	s.macA, s.macB = network.MACFor(s.ipA), network.MACFor(s.ipB)
	s.portA = network.HostVethName(h.Bridge(), "a")
	br, err := netlink.LinkByName(h.Bridge())
	if err != nil {
		t.Fatal(err)
	}
	s.bridgeMAC = br.Attrs().HardwareAddr.String()
	// a knows its neighbours' MACs without asking: a spoofed datagram
	// leaves a even though the ARP request a would send for it (from the
	// claimed address) is itself dropped. What stops it is then the IPv4
	// check, not the ARP one.
	s.inA("arp", "-i", "eth0", "-s", s.gw.String(), s.bridgeMAC)
	s.inA("arp", "-i", "eth0", "-s", s.ipB.String(), s.macB)
	return s
}

func (s *spoofNet) address(name string) netip.Addr {
	s.t.Helper()
	var i api.Instance
	out := s.OK("info", name, "--format", "json")
	if err := json.Unmarshal([]byte(out), &i); err != nil {
		s.t.Fatal(err)
	}
	a, err := netip.ParseAddr(i.IPv4)
	if err != nil {
		s.t.Fatalf("%s's address %q: %v", name, i.IPv4, err)
	}
	return a
}

// inA runs a command in container a and fails the test if it fails.
func (s *spoofNet) inA(args ...string) string {
	s.t.Helper()
	return s.OK(append([]string{"exec", "a", "--"}, args...)...)
}

// send sends one datagram from container a, from address src.
func (s *spoofNet) send(src, dst netip.Addr, msg string) {
	s.t.Helper()
	s.inA("netprobe", "send", src.String(), dst.String(), probePort, msg)
}

// claim gives a's eth0 the address ip too for the duration of f.
func (s *spoofNet) claim(ip netip.Addr, f func()) {
	s.t.Helper()
	s.inA("ip", "addr", "add", ip.String()+"/32", "dev", "eth0")
	f()
	s.inA("ip", "addr", "del", ip.String()+"/32", "dev", "eth0")
}

// hostListener receives datagrams on the gateway address, in the host's
// network namespace.
type hostListener struct {
	t    *testing.T
	conn *net.UDPConn
}

func (s *spoofNet) listenOnHost() *hostListener {
	s.t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.gw, 9999)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return &hostListener{t: s.t, conn: c}
}

// until returns every datagram ("SOURCE MESSAGE") received up to and
// including marker. The deadline only bounds a hang: the marker is sent
// after the datagrams under test, over the same path.
func (l *hostListener) until(marker string) []string {
	l.t.Helper()
	_ = l.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	var got []string
	buf := make([]byte, 512)
	for {
		n, from, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			l.t.Fatalf("the honest datagram %q never reached the host (got %q): %v", marker, got, err)
		}
		got = append(got, from.Addr().String()+" "+string(buf[:n]))
		if string(buf[:n]) == marker {
			return got
		}
	}
}

// noneSpoofed fails the test if a datagram of an attack got through.
func noneSpoofed(t *testing.T, what string, got []string) {
	t.Helper()
	for _, g := range got {
		if strings.Contains(g, "spoof") {
			t.Errorf("%s: the spoofed datagram got through: %q", what, got)
			return
		}
	}
}

// TestSpoofedSourceAddresses: container a sends datagrams claiming b's
// address, the gateway's, and another MAC. None arrives; a's honest
// datagram sent right after each does (to the host, to b: the honest path
// between containers and to the gateway works).
func TestSpoofedSourceAddresses(t *testing.T) {
	s := newSpoofNet(t)
	l := s.listenOnHost()

	t.Run("neighbour's address", func(t *testing.T) {
		s.claim(s.ipB, func() { s.send(s.ipB, s.gw, "spoof-b") })
		s.send(s.ipA, s.gw, "honest-1")
		got := l.until("honest-1")
		noneSpoofed(t, "a as b to the host", got)
		if got[len(got)-1] != s.ipA.String()+" honest-1" {
			t.Errorf("honest datagram came from %q, want a's %s", got[len(got)-1], s.ipA)
		}
	})

	t.Run("gateway's address", func(t *testing.T) {
		out := s.recvInB("honest-2", func() {
			s.claim(s.gw, func() { s.send(s.gw, s.ipB, "spoof-gw") })
			s.send(s.ipA, s.ipB, "honest-2")
		})
		noneSpoofed(t, "a as the gateway to b", out)
		if want := s.ipA.String() + " honest-2"; len(out) == 0 || out[len(out)-1] != want {
			t.Errorf("b received %q, want %q last", out, want)
		}
	})

	t.Run("another MAC", func(t *testing.T) {
		s.inA("ip", "link", "set", "eth0", "address", "0a:58:de:ad:be:ef")
		s.send(s.ipA, s.gw, "spoof-mac")
		s.inA("ip", "link", "set", "eth0", "address", s.macA)
		s.send(s.ipA, s.gw, "honest-3")
		noneSpoofed(t, "a with another MAC", l.until("honest-3"))
	})

	// The same attack with a's filter taken away gets through: the test
	// sees spoofing when there is some, and it is the filter that stops it.
	t.Run("control without the filter", func(t *testing.T) {
		s.removePortFilter(s.portA)
		s.claim(s.ipB, func() { s.send(s.ipB, s.gw, "spoof-control") })
		s.send(s.ipA, s.gw, "honest-4")
		got := l.until("honest-4")
		if len(got) < 2 || got[0] != s.ipB.String()+" spoof-control" {
			t.Errorf("without a filter the host received %q; want the spoofed datagram first: the attack itself does not work here, and the other subtests prove nothing", got)
		}
	})
}

// recvInB runs netprobe recv in container b while f runs, and returns what
// b received up to marker.
func (s *spoofNet) recvInB(marker string, f func()) []string {
	s.t.Helper()
	ready := "/tmp/netprobe.ready." + marker
	done := make(chan testhost.Result, 1)
	go func() { done <- s.Vessel("exec", "b", "--", "netprobe", "recv", probePort, marker, ready) }()
	readyOnHost := filepath.Join(s.ContainerPath("b"), ready)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(readyOnHost); err == nil {
			break
		}
		select {
		case r := <-done:
			s.t.Fatalf("netprobe recv in b ended before it was ready: %s", r)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatal("netprobe recv in b never got ready")
		}
	}
	f()
	select {
	case r := <-done:
		if r.Code != 0 {
			s.t.Fatalf("netprobe recv in b: %s", r)
		}
		return strings.Split(strings.TrimSpace(r.Stdout), "\n")
	case <-time.After(60 * time.Second):
		s.t.Fatalf("b never received the honest datagram %q", marker)
	}
	return nil
}

// removePortFilter deletes a port's filter behind the daemon's back, as
// internal/network does: the map element and the chain in one batch.
func (s *spoofNet) removePortFilter(port string) {
	s.t.Helper()
	c, err := nftables.New()
	if err != nil {
		s.t.Fatal(err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyBridge, Name: "vessel-" + s.Bridge()}
	set := &nftables.Set{Table: table, Name: "ports", IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
	key := make([]byte, 16)
	copy(key, port)
	if err := c.SetDeleteElements(set, []nftables.SetElement{{Key: key}}); err != nil {
		s.t.Fatal(err)
	}
	chain := &nftables.Chain{Table: table, Name: "port-" + port}
	c.FlushChain(chain)
	c.DelChain(chain)
	if err := c.Flush(); err != nil {
		s.t.Fatalf("remove the filter of %s: %v", port, err)
	}
}

// TestARPPoisoning: container a sends gratuitous ARP claiming the gateway's
// address and b's. b's entry for the gateway and the host's entry for b
// keep their true MACs.
func TestARPPoisoning(t *testing.T) {
	s := newSpoofNet(t)
	// Entries to poison: b learns the gateway, the host learns b.
	s.OK("exec", "b", "--", "ping", "-c", "1", "-W", "5", s.gw.String())
	if out, err := exec.Command("busybox", "ping", "-c", "1", "-W", "5", s.ipB.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping b from the host: %v\n%s", err, out)
	}
	if got := s.neighbourInB(s.gw); got != s.bridgeMAC {
		t.Fatalf("b's entry for the gateway is %q before the attack, want %s", got, s.bridgeMAC)
	}
	if got := hostNeighbour(t, s.Bridge(), s.ipB); got != s.macB {
		t.Fatalf("the host's entry for b is %q before the attack, want %s", got, s.macB)
	}

	// arping -U sends an ARP request from and for the target address, the
	// classic gratuitous ARP; -c 2 sends two, a second apart. The pings
	// after it are a barrier: a round trip through a's port that the
	// poisoned side answers after it has seen the ARP frames.
	s.claim(s.gw, func() { s.inA("arping", "-U", "-c", "2", "-I", "eth0", s.gw.String()) })
	s.inA("ping", "-c", "1", "-W", "5", s.ipB.String())
	if got := s.neighbourInB(s.gw); got != s.bridgeMAC {
		t.Errorf("after a claimed the gateway, b's entry for it is %q, want the bridge's %s", got, s.bridgeMAC)
	}

	s.claim(s.ipB, func() { s.inA("arping", "-U", "-c", "2", "-I", "eth0", s.ipB.String()) })
	s.inA("ping", "-c", "1", "-W", "5", s.gw.String())
	if got := hostNeighbour(t, s.Bridge(), s.ipB); got != s.macB {
		t.Errorf("after a claimed b's address, the host's entry for b is %q, want b's %s", got, s.macB)
	}

	// Control: without a's filter the same claim rewrites the host's entry.
	s.removePortFilter(s.portA)
	s.claim(s.ipB, func() { s.inA("arping", "-U", "-c", "2", "-I", "eth0", s.ipB.String()) })
	s.inA("ping", "-c", "1", "-W", "5", s.gw.String())
	if got := hostNeighbour(t, s.Bridge(), s.ipB); got != s.macA {
		t.Errorf("without a filter, the host's entry for b is %q after a's claim, want a's %s: the attack itself does not work here, and the checks above prove nothing", got, s.macA)
	}
}

// neighbourInB returns the MAC in b's neighbour entry for ip.
func (s *spoofNet) neighbourInB(ip netip.Addr) string {
	s.t.Helper()
	out := s.OK("exec", "b", "--", "ip", "neigh", "show", ip.String(), "dev", "eth0")
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1]
		}
	}
	return ""
}

// hostNeighbour returns the MAC of the host's neighbour entry for ip on
// the bridge ("" if none).
func hostNeighbour(t *testing.T, bridge string, ip netip.Addr) string {
	t.Helper()
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatal(err)
	}
	neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighs {
		if n.IP.Equal(net.IP(ip.AsSlice())) {
			return n.HardwareAddr.String()
		}
	}
	return ""
}

// TestInboundConnectionRefused: a machine routed through the host (a
// network namespace behind a veth, with a route to the containers' subnet
// via the host) cannot open a connection to a container's listener: the
// host refuses it at once (administratively prohibited). The host itself
// and another container still reach the listener, and the container still
// connects out through NAT.
func TestInboundConnectionRefused(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "srv")
	h.OK("launch", "busybox", "cli")
	srv := h.OK("info", "srv", "--format", "json")
	var inst api.Instance
	if err := json.Unmarshal([]byte(srv), &inst); err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(inst.IPv4, "8080")
	h.OK("exec", "srv", "--", "sh", "-c", "setsid nc -ll -p 8080 -e /bin/echo hello </dev/null >/dev/null 2>&1 &")

	// The host reaches the listener (through OUTPUT, not FORWARD); it also
	// tells when the listener is up.
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err == nil {
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line == "hello\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host never reached %s: %v", target, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Another container on the bridge reaches it.
	if out := h.OK("exec", "cli", "--", "nc", "-w", "10", inst.IPv4, "8080"); !strings.Contains(out, "hello") {
		t.Errorf("container to container: read %q, want hello", out)
	}

	ext := testhost.NewOutside(t, "vs", "198.51.100.5", "198.51.100.6", h.Subnet()) // TEST-NET-2
	_, err := ext.Dial(target)
	if err == nil {
		t.Fatalf("a connection from outside the host to %s was accepted", target)
	}
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("connect from outside: %v, want it refused as unreachable (administratively prohibited)", err)
	}
	t.Logf("connect from outside: %v", err)

	// Outbound still works, and its answers come back in.
	ln := ext.Listen("8081")
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("pong\n"))
		got <- line
	}()
	out := h.OK("exec", "cli", "--", "sh", "-c", "echo ping | nc -w 10 "+ext.Addr+" 8081")
	select {
	case line := <-got:
		if line != "ping\n" || !strings.Contains(out, "pong") {
			t.Errorf("outbound exchange: outside read %q, container read %q", line, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the outside never saw the container's connection")
	}
}

// TestFilterBackAfterDaemonRestart: a running container whose port filter
// is missing (started by a vessel without filters, or flushed by hand)
// gets it back when the daemon restarts and adopts it.
func TestFilterBackAfterDaemonRestart(t *testing.T) {
	s := newSpoofNet(t)
	l := s.listenOnHost()
	s.removePortFilter(s.portA)
	s.RestartDaemon()
	s.claim(s.ipB, func() { s.send(s.ipB, s.gw, "spoof-b") })
	s.send(s.ipA, s.gw, "honest-1")
	noneSpoofed(t, "a as b after a daemon restart", l.until("honest-1"))
}
