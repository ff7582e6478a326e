package integration

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/testhost"
)

// TestOutboundNAT: a container reaches a network beyond the host, and that
// network sees the host's address, not the container's (masquerade). The
// "outside" is a network namespace behind a veth from the host, with no
// route back to the containers' subnet: only NAT lets the answer return.
func TestOutboundNAT(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "n1")

	ext := testhost.NewOutside(t, "vt", "198.51.100.1", "198.51.100.2") // TEST-NET-2: no route back, only NAT
	ln := ext.Listen("8080")
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

	out := h.OK("exec", "n1", "--", "sh", "-c", "echo ping | nc -w 10 "+ext.Addr+" 8080")
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
	if s.from != ext.HostAddr {
		t.Fatalf("the outside saw %s, want the host's %s (masquerade)", s.from, ext.HostAddr)
	}
}
