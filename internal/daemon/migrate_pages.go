package daemon

import (
	"context"
	"io"
	"net"
	"sync/atomic"

	"github.com/vesselhost/vessel/internal/migration"
)

// Post-copy memory crosses the migration session: the target's lazy-pages
// daemon connects to a local port (tunnelPages), each connection becomes a
// session stream, and the source forwards it to the dump's page server
// (servePages).

// servePages tunnels the target's lazy-pages connections, which arrive as
// streams on the session, to the local page server.
func (m *migrationSource) servePages(ctx context.Context, addr string) {
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		if h.Kind != migration.StreamPageServer {
			st.Close()
			continue
		}
		go func() {
			defer st.Close()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				m.d.log.Error("page server unreachable", "addr", addr, "err", err)
				return
			}
			defer c.Close()
			pipe(st, c)
		}()
	}
}

// pipe copies both ways until both directions have ended, passing each
// end of input on as a half-close: CRIU's page server finishes only when it
// sees the lazy-pages daemon hang up.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // TCP
		} else {
			_ = dst.Close() // a yamux stream's Close is a half-close (FIN)
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// tunnelPages listens on a local port for the lazy-pages daemon and
// forwards each connection to the source's page server over the session.
func (m *migrationTarget) tunnelPages(ctx context.Context) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() {
		<-m.sess.Closed()
		ln.Close()
	}()
	go func() {
		defer ln.Close()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPageServer})
			if err != nil {
				c.Close()
				return
			}
			go func() {
				defer c.Close()
				defer st.Close()
				pipe(c, &countingConn{Conn: st, n: &m.pageBytes})
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// countingConn counts bytes read from the tunnel (pages coming in).
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// pageSink streams each page file of a dump to the target on its own
// stream; the target acknowledges them all with the other images.
type pageSink struct{ m *migrationSource }

// Store implements imgstream.Sink.
func (p *pageSink) Store(ctx context.Context, name string, r io.Reader) error {
	st, err := p.m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPage, Name: name})
	if err != nil {
		return err
	}
	n, err := io.Copy(st, r)
	p.m.pageBytes.Add(n)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}
