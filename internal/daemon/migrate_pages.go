package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// Post-copy memory crosses the page link and nothing else: on the source,
// CRIU's page server serves one end of a socket pair and vesseld holds
// the other (runtime.Checkpoint.PageConn); on the target, `criu
// lazy-pages` gets one end of another socket pair (tunnelPages). The page
// link is a TLS connection of its own beside the session (see
// migration.PagesProtocol): the source dials it as soon as the target
// accepts a post-copy Hello, which carries its token; the target parks it
// (pageLinks) until the move's restore claims it. Each daemon relays
// between the link and its socket (migration.Relay). No port is opened and
// no path is bound: no other process on either host can read the pages or
// break the move, the link's mutual TLS authenticates the peer and the
// token binds the link to the session.

// pageLinkDial is the source's page link, being dialled.
type pageLinkDial struct {
	done chan struct{}
	conn net.Conn
	err  error
}

// dialPageLink opens the page link to the target in the background (out
// of the frozen window: a TLS handshake); it is closed when the session
// ends.
func (m *migrationSource) dialPageLink(ctx context.Context, peer state.Peer, token string) {
	l := &pageLinkDial{done: make(chan struct{})}
	m.link = l
	go func() {
		defer close(l.done)
		var raw *migration.FlushConn
		conn, err := m.d.peerAPIFor(peer).UpgradeWith(ctx, "/1.0/migration", migration.PagesProtocol, func(c net.Conn) net.Conn {
			raw = &migration.FlushConn{Conn: c}
			return raw
		})
		if err == nil {
			if err = migration.WritePageToken(conn, token); err != nil {
				conn.Close()
			}
		}
		if err != nil {
			l.err = fmt.Errorf("page link to %s: %w", peer.Name, err)
			return
		}
		l.conn = migration.NewPageLink(conn, raw)
		sess := m.sess
		go func() {
			<-sess.Closed()
			conn.Close()
		}()
	}()
}

// awaitPageLink waits until the page link is dialled (it normally is:
// the disk passes came in between) and returns its error.
func (m *migrationSource) awaitPageLink(ctx context.Context) error {
	l := m.link
	if l == nil {
		return errors.New("post-copy move without a page link")
	}
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// servePages relays between the page link and the page server's socket.
// Without a link (it failed) the page server is hung up on: the target's
// lazy-pages fails and says so.
func (m *migrationSource) servePages(ctx context.Context, ps net.Conn) {
	l := m.link
	if l == nil {
		ps.Close()
		return
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		ps.Close()
		return
	}
	if l.err != nil {
		m.d.log.Warn("migration source: no page link", "name", m.name, "err", l.err)
		ps.Close()
		return
	}
	migration.Relay(l.conn, ps)
	l.conn.Close()
}

// tunnelPages makes the socket pair for the lazy-pages daemon and connects
// this end to the source's page server over the page link: the returned
// file is the daemon's end (the caller closes it once the daemon has it).
func (m *migrationTarget) tunnelPages(ctx context.Context) (*os.File, error) {
	link, err := m.d.pageLinks.claim(ctx, m.hello.PageToken, m.peer)
	if err != nil {
		return nil, err
	}
	c, lp, err := runtime.SocketPair()
	if err != nil {
		link.Close()
		return nil, fmt.Errorf("page server socket: %w", err)
	}
	sess := m.sess
	go func() {
		<-sess.Closed()
		link.Close()
	}()
	go func() {
		defer c.Close()
		defer link.Close()
		migration.Relay(c, &countingConn{Conn: link, n: &m.pageBytes})
	}()
	return lp, nil
}

// pageLinkWait bounds how long a restore waits for its page link (it
// comes right after the Hello: normally it is long there).
const pageLinkWait = 10 * time.Second

// maxParkedLinks bounds the page links waiting for their move.
const maxParkedLinks = 64

// pageLinks parks incoming page links by token until their move claims
// them; one not claimed within the migration timeout is closed.
type pageLinks struct {
	mu sync.Mutex
	m  map[string]*parkedLink
}

type parkedLink struct {
	ready chan struct{} // closed when conn is set
	peer  string
	conn  net.Conn
	timer *time.Timer
}

// slot returns token's entry, made if new. Under mu.
func (p *pageLinks) slot(token string) *parkedLink {
	if p.m == nil {
		p.m = map[string]*parkedLink{}
	}
	s := p.m[token]
	if s == nil {
		s = &parkedLink{ready: make(chan struct{})}
		p.m[token] = s
	}
	return s
}

// park holds conn for its move.
func (p *pageLinks) park(token, peer string, conn net.Conn, keep time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.m[token]; s != nil && s.conn != nil {
		return errors.New("a second page link with the same token")
	}
	if len(p.m) >= maxParkedLinks {
		return errors.New("too many page links waiting")
	}
	s := p.slot(token)
	s.peer, s.conn = peer, conn
	s.timer = time.AfterFunc(keep, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.m[token] == s {
			delete(p.m, token)
			conn.Close()
		}
	})
	close(s.ready)
	return nil
}

// claim takes token's page link, waiting up to pageLinkWait for it; it
// must come from peer.
func (p *pageLinks) claim(ctx context.Context, token, peer string) (net.Conn, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: a post-copy move without a page token", migration.ErrProtocol)
	}
	p.mu.Lock()
	s := p.slot(token)
	p.mu.Unlock()
	t := time.NewTimer(pageLinkWait)
	defer t.Stop()
	var err error
	select {
	case <-s.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("the source's page link did not come within %s", pageLinkWait)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[token] == s {
		delete(p.m, token)
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	if err == nil && s.conn == nil {
		err = errors.New("no page link")
	}
	if err != nil {
		if s.conn != nil {
			s.conn.Close()
		}
		return nil, err
	}
	if s.peer != peer {
		s.conn.Close()
		return nil, fmt.Errorf("%w: the page link came from %s, the move from %s", migration.ErrProtocol, s.peer, peer)
	}
	return s.conn, nil
}

// AcceptPageLink reads an incoming page link's token and parks it for its
// move (it implements server.Core).
func (d *Daemon) AcceptPageLink(peer string, conn net.Conn) {
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		token, err := migration.ReadPageToken(conn)
		if err == nil {
			_ = conn.SetReadDeadline(time.Time{})
			err = d.pageLinks.park(token, peer, conn, d.cfg.MigrationTimeout)
		}
		if err != nil {
			conn.Close()
			d.log.Warn("incoming page link refused", "peer", peer, "err", err)
		}
	}()
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

// CloseWrite half-closes the link underneath.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
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
