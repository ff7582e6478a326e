package migration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"sync"
)

// The page link carries a post-copy move's memory: the lazy-pages
// daemon's requests and the source page server's answers, gigabytes in a
// few seconds. It is a connection of its own beside the session, not a
// yamux stream of it: yamux costs a TLS record and a write for each
// frame's 12-byte header, a copy into its send buffer, two copies on the
// way in (its reader's buffer, the stream's buffer) and a goroutine
// hand-off per frame, which made vesseld the bottleneck of the pull.
//
// The source opens it right after the target accepted the Hello, as it
// opens the session: an HTTPS request to the target's API upgraded to
// PagesProtocol, over the same mutually authenticated TLS (only a trusted
// peer gets that far). Its first bytes are the PageToken the Hello
// carried over the session (random, 128 bits, known only to the two
// ends), which binds the link to that session; the target hands it to the
// move whose Hello named that token, from the same peer, and closes any
// other. The pages stay encrypted on the wire (TLS 1.3, AES-GCM).

// PagesProtocol names the HTTP upgrade to a page link.
const PagesProtocol = "vessel-migration-pages/1"

// pageTokenLen is a page token's length on the wire (hex).
const pageTokenLen = 32

// NewPageToken returns a fresh random page token.
func NewPageToken() string {
	b := make([]byte, pageTokenLen/2)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// WritePageToken opens a page link: it sends the token.
func WritePageToken(w io.Writer, token string) error {
	if len(token) != pageTokenLen {
		return fmt.Errorf("%w: page token of %d bytes", ErrProtocol, len(token))
	}
	if _, err := io.WriteString(w, token); err != nil {
		return fmt.Errorf("page link: %w", err)
	}
	return nil
}

// ReadPageToken reads the token that opens a page link (and nothing
// after it).
func ReadPageToken(r io.Reader) (string, error) {
	b := make([]byte, pageTokenLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("page link token: %w", err)
	}
	if _, err := hex.DecodeString(string(b)); err != nil {
		return "", fmt.Errorf("%w: page link token: %w", ErrProtocol, err)
	}
	return string(b), nil
}

// Relay copies both ways between a and b until both directions have
// ended, passing each end of input on as a half-close (CRIU's page server
// finishes only when it sees the lazy-pages daemon hang up). Each
// direction reads into a ring and writes whatever has gathered there in
// one call: while a write is under way the reads behind it pile up, so
// the writes (TLS records, syscalls, the peer's wake-ups) grow with the
// load instead of one per read. A side with a Flush method (a PageLink)
// is flushed after each write to it.
func Relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { relayOne(a, b); done <- struct{}{} }()
	go func() { relayOne(b, a); done <- struct{}{} }()
	<-done
	<-done
}

// relayBuf is one direction's ring; relayChunk bounds one read or write.
const (
	relayBuf   = 4 << 20
	relayChunk = 1 << 20
)

func relayOne(dst, src net.Conn) {
	r := newRing(relayBuf)
	go func() {
		for {
			p := r.space(relayChunk)
			if p == nil {
				return // the writer has failed
			}
			n, err := src.Read(p)
			r.commit(n)
			if err != nil {
				r.close()
				return
			}
		}
	}()
	for {
		p, ok := r.data(relayChunk)
		if !ok {
			break
		}
		_, err := dst.Write(p)
		if err == nil {
			if f, isF := dst.(interface{ Flush() error }); isF {
				err = f.Flush()
			}
		}
		if err != nil {
			r.fail()
			// The reader may sit in a read: end it so it sees the failure.
			_ = src.Close()
			break
		}
		r.release(len(p))
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// ring is a single-reader single-writer byte ring: the reader fills free
// space without the lock and commits it; the writer takes what is
// committed, writes it without the lock and releases it.
type ring struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	r, n   int  // start and length of the committed data
	held   int  // free bytes handed to the reader, not committed yet
	eof    bool // the reader is done
	failed bool // the writer is done
}

func newRing(size int) *ring {
	g := &ring{buf: make([]byte, size)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// space waits for free space after the data and returns up to max bytes
// of it, contiguous; nil once the writer has failed.
func (g *ring) space(max int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.n == len(g.buf) && !g.failed {
		g.cond.Wait()
	}
	if g.failed {
		return nil
	}
	w := (g.r + g.n) % len(g.buf)
	end := len(g.buf)
	if w < g.r {
		end = g.r
	}
	if end-w > max {
		end = w + max
	}
	g.held = end - w
	return g.buf[w:end]
}

func (g *ring) commit(n int) {
	g.mu.Lock()
	g.n += n
	g.held = 0
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *ring) close() {
	g.mu.Lock()
	g.eof = true
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *ring) fail() {
	g.mu.Lock()
	g.failed = true
	g.mu.Unlock()
	g.cond.Broadcast()
}

// data waits for committed data and returns up to max bytes of it,
// contiguous; ok is false once the reader is done and all was taken.
func (g *ring) data(max int) (p []byte, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.n == 0 && !g.eof {
		g.cond.Wait()
	}
	if g.n == 0 {
		return nil, false
	}
	end := g.r + g.n
	if end > len(g.buf) {
		end = len(g.buf)
	}
	if end-g.r > max {
		end = g.r + max
	}
	return g.buf[g.r:end], true
}

func (g *ring) release(n int) {
	g.mu.Lock()
	g.r = (g.r + n) % len(g.buf)
	g.n -= n
	g.mu.Unlock()
	g.cond.Broadcast()
}

// FlushConn buffers what is written to a connection until Flush: put
// under a TLS connection and flushed after each TLS write, it makes that
// write's records one syscall (one TCP push, one wake-up of the peer)
// instead of one per 16 KiB record. Writes pass straight through until
// Buffer is called (the TLS handshake, the upgrade request).
type FlushConn struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	buf []byte
}

// flushAt bounds the buffer: a larger write is flushed as it goes.
const flushAt = 512 << 10

// Buffer starts buffering writes.
func (c *FlushConn) Buffer() {
	c.mu.Lock()
	c.on = true
	c.mu.Unlock()
}

func (c *FlushConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= flushAt {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what is buffered.
func (c *FlushConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushLocked()
}

func (c *FlushConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// unbuffer flushes and lets later writes pass straight through.
func (c *FlushConn) unbuffer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.flushLocked()
}

// Close flushes, then closes.
func (c *FlushConn) Close() error {
	_ = c.Flush()
	return c.Conn.Close()
}

// PageLink is the source's end of a page link: the upgraded TLS
// connection over a FlushConn, buffering from now on. The relay flushes
// after each write; a half-close flushes its alert.
type PageLink struct {
	net.Conn
	raw *FlushConn
}

// NewPageLink wraps conn, whose raw connection under TLS is raw.
func NewPageLink(conn net.Conn, raw *FlushConn) *PageLink {
	raw.Buffer()
	return &PageLink{Conn: conn, raw: raw}
}

// Flush sends what is buffered.
func (l *PageLink) Flush() error { return l.raw.Flush() }

// CloseWrite ends this direction: it flushes, stops buffering, then sends
// TLS's close_notify (which ends with a write deadline in the past: it
// must not sit in the buffer).
func (l *PageLink) CloseWrite() error {
	err := l.raw.unbuffer()
	if cw, ok := l.Conn.(interface{ CloseWrite() error }); ok {
		if cerr := cw.CloseWrite(); err == nil {
			err = cerr
		}
	}
	return err
}
