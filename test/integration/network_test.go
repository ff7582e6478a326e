package integration

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestOutboundNAT: a container reaches a network beyond the host, and that
// network sees the host's address, not the container's (masquerade). The
// "outside" is a network namespace behind a veth from the host, with no
// route back to the containers' subnet: only NAT lets the answer return.
func TestOutboundNAT(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "n1")

	id := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	ns, hostIf, extIf := "vtext"+id, "vtxh"+id, "vtxe"+id
	const hostAddr, extAddr = "198.51.100.1", "198.51.100.2" // TEST-NET-2
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
	ip("-n", ns, "addr", "add", extAddr+"/30", "dev", extIf)
	ip("-n", ns, "link", "set", extIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	ln := listenIn(t, ns, net.JoinHostPort(extAddr, "8080"))
	defer ln.Close()
	type seen struct {
		from, line string
		err        error
	}
	got := make(chan seen, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- seen{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			_, err = c.Write([]byte("pong\n"))
		}
		got <- seen{from: c.RemoteAddr().(*net.TCPAddr).IP.String(), line: line, err: err}
	}()

	out := h.OK("exec", "n1", "--", "sh", "-c", "echo ping | nc -w 10 "+extAddr+" 8080")
	var s seen
	select {
	case s = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the outside never saw a connection")
	}
	if s.err != nil {
		t.Fatalf("outside: %v", s.err)
	}
	if s.line != "ping\n" || !strings.Contains(out, "pong") {
		t.Fatalf("exchange: outside read %q, container read %q", s.line, out)
	}
	if s.from != hostAddr {
		t.Fatalf("the outside saw %s, want the host's %s (masquerade)", s.from, hostAddr)
	}
}

// listenIn opens a TCP listener inside network namespace ns. The socket
// stays in that namespace whatever thread accepts on it; the thread that
// entered ns is locked and never unlocked, so Go retires it.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- result{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen in %s: %v", ns, r.err)
	}
	return r.ln
}
