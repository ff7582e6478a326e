package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Session is one migration connection, seen from either end.
type Session struct {
	mux *yamux.Session
	ctl net.Conn
	enc *json.Encoder
	dec *json.Decoder
	// wmu serialises control writes (progress may be sent from goroutines).
	wmu sync.Mutex
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

func newSession(mux *yamux.Session, ctl net.Conn) *Session {
	return &Session{mux: mux, ctl: ctl, enc: json.NewEncoder(ctl), dec: json.NewDecoder(ctl)}
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
	go func() { done <- s.dec.Decode(v) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("migration: connection to peer lost: %w", err)
		}
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
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

// OpenStream opens a data stream (the peer accepts it with AcceptStream).
func (s *Session) OpenStream() (net.Conn, error) {
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("migration: open stream: %w", err)
	}
	return st, nil
}

// AcceptStream accepts the peer's next data stream.
func (s *Session) AcceptStream(ctx context.Context) (net.Conn, error) {
	st, err := s.mux.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration: accept stream: %w", err)
	}
	return st, nil
}

// Closed is closed when the session ends (peer gone, connection cut).
func (s *Session) Closed() <-chan struct{} { return s.mux.CloseChan() }

// Close ends the session and its connection.
func (s *Session) Close() error { return s.mux.Close() }
