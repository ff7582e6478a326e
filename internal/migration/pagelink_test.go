package migration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"io"
	"math/big"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// socketPair is a connected pair of unix stream sockets (as CRIU's page
// server and lazy-pages get).
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := fileFromFD(fd)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// tlsLink returns both ends of a TLS 1.3 connection over loopback, the
// client's as the source's PageLink (records buffered under TLS).
func tlsLink(t testing.TB, flush bool) (src net.Conn, dst net.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(der)
	pool.AddCert(leaf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		s := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})
		if err := s.Handshake(); err != nil {
			c.Close()
			accepted <- nil
			return
		}
		accepted <- s
	}()
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw := &FlushConn{Conn: tcp}
	c := tls.Client(raw, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "test",
		MinVersion: tls.VersionTLS13})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	dst = <-accepted
	if dst == nil {
		t.Fatal("TLS server handshake failed")
	}
	if !flush {
		return c, dst
	}
	return NewPageLink(c, raw), dst
}

// pull wires a page server and a lazy-pages end through two relays and
// the link, as a post-copy move does: it returns lazy-pages' end and the
// page server's end.
func pull(t testing.TB) (lazy, server net.Conn) {
	src, dst := tlsLink(t, true)
	ps, psRelay := socketPair(t)
	lp, lpRelay := socketPair(t)
	go func() { Relay(src, psRelay); src.Close(); psRelay.Close() }()
	go func() { Relay(lpRelay, dst); dst.Close(); lpRelay.Close() }()
	t.Cleanup(func() { ps.Close(); lp.Close() })
	return lp, ps
}

// servePagesFake answers each 8-byte request (a size) with that many
// bytes of a pattern, until the requester hangs up, then hangs up.
func servePagesFake(c net.Conn) {
	defer c.Close()
	req := make([]byte, 8)
	var off uint64
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		n := binary.LittleEndian.Uint64(req)
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(off + uint64(i))
		}
		off += n
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func TestPageLinkRelay(t *testing.T) {
	lp, ps := pull(t)
	go servePagesFake(ps)
	var off uint64
	for _, n := range []uint64{1, 4096, 100000, 4 << 20, 3, 16 << 10} {
		req := make([]byte, 8)
		binary.LittleEndian.PutUint64(req, n)
		if _, err := lp.Write(req); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(lp, got); err != nil {
			t.Fatalf("answer of %d bytes: %v", n, err)
		}
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(off + uint64(i))
		}
		off += n
		if !bytes.Equal(got, want) {
			t.Fatalf("answer of %d bytes differs", n)
		}
	}
	// lazy-pages hangs up: the page server sees it and hangs up too, which
	// comes back as the end of input.
	if err := lp.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(lp)
		if err == nil && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the hang-up did not come back through the link")
	}
}

func TestPageToken(t *testing.T) {
	tok := NewPageToken()
	var b bytes.Buffer
	if err := WritePageToken(&b, tok); err != nil {
		t.Fatal(err)
	}
	b.WriteString("rest")
	got, err := ReadPageToken(&b)
	if err != nil || got != tok {
		t.Fatalf("ReadPageToken = %q, %v; want %q", got, err, tok)
	}
	if b.String() != "rest" {
		t.Fatalf("ReadPageToken read past the token: %q left", b.String())
	}
	if _, err := ReadPageToken(bytes.NewBufferString("zz" + tok[2:])); err == nil {
		t.Fatal("a token that is not hex was read")
	}
}

// BenchmarkPageLink pulls 4 MiB chunks, 4 requests in flight (as
// lazy-pages does), through both relays and the TLS link.
func BenchmarkPageLink(b *testing.B) {
	lp, ps := pull(b)
	go servePagesFake2(ps)
	pullChunks(b, lp)
}

// pullChunks pulls b.N chunks of 4 MiB through lazy-pages' end lp, 4
// requests in flight (as lazy-pages does).
func pullChunks(b *testing.B, lp net.Conn) {
	const chunk = 4 << 20
	b.SetBytes(chunk)
	req := make([]byte, 8)
	binary.LittleEndian.PutUint64(req, chunk)
	buf := make([]byte, chunk)
	inflight := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for inflight < 4 {
			if _, err := lp.Write(req); err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		if _, err := io.ReadFull(lp, buf); err != nil {
			b.Fatal(err)
		}
		inflight--
	}
}

// servePagesFake2 is servePagesFake without the pattern (no CPU of its
// own to speak of).
func servePagesFake2(c net.Conn) {
	defer c.Close()
	req := make([]byte, 8)
	buf := make([]byte, 4<<20)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		if _, err := c.Write(buf[:binary.LittleEndian.Uint64(req)]); err != nil {
			return
		}
	}
}

func fileFromFD(fd int) *os.File { return os.NewFile(uintptr(fd), "socket") }

// BenchmarkSessionStream is BenchmarkPageLink through a stream of the
// session (yamux over the TLS connection), the page path before the page
// link, with the old relay (io.Copy each way).
func BenchmarkSessionStream(b *testing.B) {
	src, dst := tlsLink(b, false)
	type res struct {
		s   *Session
		err error
	}
	srv := make(chan res, 1)
	go func() {
		s, err := Server(context.Background(), dst)
		srv <- res{s, err}
	}()
	cs, err := Client(src)
	if err != nil {
		b.Fatal(err)
	}
	r := <-srv
	if r.err != nil {
		b.Fatal(r.err)
	}
	defer cs.Close()
	defer r.s.Close()
	ps, psRelay := socketPair(b)
	lp, lpRelay := socketPair(b)
	defer ps.Close()
	defer lp.Close()
	go func() {
		st, _, err := cs.AcceptStream(context.Background())
		if err != nil {
			return
		}
		copyBoth(st, psRelay)
	}()
	st, err := r.s.OpenStream(StreamHeader{Kind: StreamPageServer})
	if err != nil {
		b.Fatal(err)
	}
	go copyBoth(lpRelay, st)
	go servePagesFake2(ps)
	pullChunks(b, lp)
}

func copyBoth(a, b net.Conn) {
	go func() { _, _ = io.Copy(a, b) }()
	_, _ = io.Copy(b, a)
}
