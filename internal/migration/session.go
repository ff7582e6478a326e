package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// Session is one migration connection, seen from either end.
type Session struct {
	mux *yamux.Session
	ctl net.Conn
	enc *json.Encoder
	dec *json.Decoder
	in  *capReader // under dec: counts each message's bytes
	// wmu serialises control writes (progress may be sent from goroutines).
	wmu sync.Mutex
	// local: this end closed the session (Close, or Recv's ended
	// context) while it was still up.
	local atomic.Bool
}

func muxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	// Bulk transfers want deep windows: a disk send stream or checkpoint
	// images can be gigabytes.
	cfg.MaxStreamWindowSize = 16 << 20
	cfg.ConnectionWriteTimeout = 30 * time.Second
	cfg.KeepAliveInterval = 5 * time.Second
	cfg.LogOutput = io.Discard
	return cfg
}

// Client starts the source's end over an established connection and opens
// the control stream.
func Client(conn net.Conn) (*Session, error) {
	mux, err := yamux.Client(conn, muxConfig())
	if err != nil {
		return nil, fmt.Errorf("migration session: %w", err)
	}
	ctl, err := mux.OpenStream()
	if err != nil {
		mux.Close()
		return nil, fmt.Errorf("migration control stream: %w", err)
	}
	return newSession(mux, ctl), nil
}

// Server starts the target's end and accepts the control stream.
func Server(ctx context.Context, conn net.Conn) (*Session, error) {
	mux, err := yamux.Server(conn, muxConfig())
	if err != nil {
		return nil, fmt.Errorf("migration session: %w", err)
	}
	ctl, err := mux.AcceptStreamWithContext(ctx)
	if err != nil {
		mux.Close()
		return nil, fmt.Errorf("migration control stream: %w", err)
	}
	return newSession(mux, ctl), nil
}

// MaxMessage bounds one control message as read (a Hello, a Message): the
// largest real ones are an "images" message naming every page file and an
// error quoting a CRIU log.
const MaxMessage = 4 << 20

func newSession(mux *yamux.Session, ctl net.Conn) *Session {
	s := &Session{mux: mux, ctl: ctl, enc: json.NewEncoder(ctl)}
	s.in = &capReader{r: ctl, max: MaxMessage}
	s.dec = json.NewDecoder(s.in)
	return s
}

// capReader fails a read once more than max bytes were read since reset:
// a peer cannot make the decoder buffer a message without end.
type capReader struct {
	r   io.Reader
	n   atomic.Int64
	max int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n.Load() > c.max {
		return 0, fmt.Errorf("%w: a control message longer than %d bytes", ErrProtocol, c.max)
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Send writes a control message (the Hello, or a Message).
func (s *Session) Send(v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.enc.Encode(v); err != nil {
		return fmt.Errorf("migration: send: %w", err)
	}
	return nil
}

// SendError reports a failure to the peer (best effort).
func (s *Session) SendError(err error) {
	_ = s.Send(Message{Type: MsgError, Error: err.Error()})
}

// Recv reads the next control message into v. It returns when ctx ends
// (closing the session) or the connection breaks.
func (s *Session) Recv(ctx context.Context, v any) error {
	done := make(chan error, 1)
	s.in.n.Store(0)
	go func() { done <- s.dec.Decode(v) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("migration: connection to peer lost: %w", err)
		}
		return nil
	case <-ctx.Done():
		_ = s.Close() // ends the pending Decode
		<-done        //nolint:errcheck // the closed session's error: ctx's is the cause
		return ctx.Err()
	}
}

// Expect receives a Message of type want.
func (s *Session) Expect(ctx context.Context, want string) (Message, error) {
	var m Message
	if err := s.Recv(ctx, &m); err != nil {
		return m, err
	}
	return m, Expect(m, want)
}

// Kinds of data streams.
const (
	// StreamDisk carries a storage send stream (container or snapshot disk).
	StreamDisk = "disk"
	// StreamImages carries checkpoint images other than memory pages (a tar,
	// see SendDir), or a stateful snapshot's checkpoint.
	StreamImages = "images"
	// StreamPage carries one memory page file of a dump as CRIU writes it.
	StreamPage = "page"
	// StreamPageServer tunnels a lazy-pages connection to the source's page
	// server (opened by the target).
	StreamPageServer = "page-server"
	// StreamLogs carries the console log written on the source.
	StreamLogs = "logs"
	// StreamVMDisk carries one NBD connection of a VM's disk mirror: the
	// source QEMU's drive-mirror client to the target QEMU's NBD server,
	// both on unix sockets the daemons relay.
	StreamVMDisk = "vm-disk"
)

// StreamHeader opens every data stream: what it carries.
type StreamHeader struct {
	Kind string `json:"kind"`
	Name string `json:"name,omitempty"`
}

// maxHeader bounds a stream header line.
const maxHeader = 4096

// OpenStream opens a data stream of the given kind (the peer accepts it
// with AcceptStream and learns the header).
func (s *Session) OpenStream(h StreamHeader) (net.Conn, error) {
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("migration: open stream: %w", err)
	}
	b, _ := json.Marshal(h)
	if _, err := st.Write(append(b, '\n')); err != nil {
		st.Close()
		return nil, fmt.Errorf("migration: open stream: %w", err)
	}
	return st, nil
}

// AcceptStream accepts the peer's next data stream and reads its header.
func (s *Session) AcceptStream(ctx context.Context) (net.Conn, StreamHeader, error) {
	var h StreamHeader
	st, err := s.mux.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, h, fmt.Errorf("migration: accept stream: %w", err)
	}
	// Byte by byte: nothing after the header may be consumed here.
	line := make([]byte, 0, 64)
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(st, b); err != nil {
			st.Close()
			return nil, h, fmt.Errorf("migration: stream header: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if line = append(line, b[0]); len(line) > maxHeader {
			st.Close()
			return nil, h, fmt.Errorf("%w: stream header too long", ErrProtocol)
		}
	}
	if err := json.Unmarshal(line, &h); err != nil {
		st.Close()
		return nil, h, fmt.Errorf("%w: stream header: %w", ErrProtocol, err)
	}
	return st, h, nil
}

// Closed is closed when the session ends (peer gone, connection cut).
func (s *Session) Closed() <-chan struct{} { return s.mux.CloseChan() }

// Linger closes the session once the peer has (it read whatever was sent,
// an error last), or after d. Closing at once could lose what was just
// sent: a connection closed with unread data coming in is reset, and the
// peer's kernel drops what it had not read yet.
func (s *Session) Linger(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.mux.CloseChan():
	case <-t.C:
	}
	_ = s.Close()
}

// PeerGone says whether the session ended without this end closing it:
// the peer closed it or died, or the connection broke or stopped
// answering (yamux's keep-alive and write timeout). False while the
// session is up, and after Close ended it.
func (s *Session) PeerGone() bool {
	select {
	case <-s.mux.CloseChan():
		return !s.local.Load()
	default:
		return false
	}
}

// Reported returns the error the peer reported just before the session
// ended, if it is among the control messages this end has not read (a
// peer that fails sends its error, then closes), or nil. It reads nothing
// while the session is up; once it has ended it reads only what had
// arrived, so it does not block. Nothing else may be reading meanwhile.
func (s *Session) Reported() error {
	select {
	case <-s.mux.CloseChan():
	default:
		return nil
	}
	// Up to the end of what had arrived.
	for m := (Message{}); s.decodeNext(&m); m = (Message{}) {
		if m.Type == MsgError {
			return fmt.Errorf("%w: %s", ErrRemote, m.Error)
		}
	}
	return nil
}

// decodeNext decodes the next control message into m, and says whether
// there was one.
func (s *Session) decodeNext(m *Message) bool {
	s.in.n.Store(0)
	return s.dec.Decode(m) == nil
}

// Close ends the session and its connection.
func (s *Session) Close() error {
	select {
	case <-s.mux.CloseChan(): // ended already: whoever ended it stays the cause
	default:
		s.local.Store(true)
	}
	return s.mux.Close()
}
