package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/runtime"
)

// Post-copy memory crosses the migration session and nothing else: on the
// source, CRIU's page server serves one end of a socket pair and vesseld
// holds the other (runtime.Checkpoint.PageConn); on the target, `criu
// lazy-pages` gets one end of another socket pair (tunnelPages). The
// target opens one page-server stream on the session and each daemon
// copies between it and its socket (servePages). No port is opened and no
// path is bound: no other process on either host can read the pages or
// break the move, and the session's mutual TLS authenticates the peer.

// servePages connects the target's one page-server stream, which arrives
// on the session, to the page server's socket. Any other stream, or a
// second page-server stream, is refused.
func (m *migrationSource) servePages(ctx context.Context, ps net.Conn) {
	served := false
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		if h.Kind != migration.StreamPageServer || served {
			st.Close()
			continue
		}
		served = true
		go func() {
			defer st.Close()
			pipe(st, ps)
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
			_ = cw.CloseWrite() // a socket
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

// tunnelPages makes the socket pair for the lazy-pages daemon and connects
// this end to the source's page server over the session: the returned file
// is the daemon's end (the caller closes it once the daemon has it).
func (m *migrationTarget) tunnelPages() (*os.File, error) {
	c, lp, err := runtime.SocketPair()
	if err != nil {
		return nil, fmt.Errorf("page server socket: %w", err)
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPageServer})
	if err != nil {
		c.Close()
		lp.Close()
		return nil, err
	}
	go func() {
		defer c.Close()
		defer st.Close()
		pipe(c, &countingConn{Conn: st, n: &m.pageBytes})
	}()
	return lp, nil
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
