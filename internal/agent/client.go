package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// ErrAgent marks an error the agent answered with (as opposed to a broken
// channel).
var ErrAgent = errors.New("agent")

// Client is the host's end of a session with a guest's agent. Its methods
// are safe for concurrent use; each request is a stream of its own.
type Client struct {
	conn net.Conn
	sess *yamux.Session
}

// NewClient starts a session over conn (the guest's channel). It does not
// wait for the agent: Ping does.
func NewClient(conn net.Conn) (*Client, error) {
	sess, err := yamux.Client(conn, yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("agent session: %w", err)
	}
	return &Client{conn: conn, sess: sess}, nil
}

// Close ends the session and closes the channel.
func (c *Client) Close() error {
	return c.sess.Close()
}

// Done is closed when the session has ended.
func (c *Client) Done() <-chan struct{} {
	return c.sess.CloseChan()
}

// DialFunc opens a channel to the guest: a unix socket to QEMU's chardev,
// or a vsock connection.
type DialFunc func(ctx context.Context) (net.Conn, error)

// DialOptions tunes Dial.
type DialOptions struct {
	// Attempt bounds one attempt: a connection and a ping (default 2s).
	Attempt time.Duration
	// Retry is the pause between attempts (default 50ms).
	Retry time.Duration
	// Stale is the pause after finding a stale session (default 500ms).
	Stale time.Duration
}

// errStaleSession: the first ping on a new connection was not the first
// stream of the agent's session. A virtio-serial port has no connection of
// its own: when the host side closes and reconnects faster than the guest
// sees it close, the guest's old session reads the new bytes. Dial then
// closes the connection and pauses, so that the guest sees the port close
// and starts a fresh session.
var errStaleSession = errors.New("agent: the guest's session is a previous connection's")

// Dial connects to the agent, retrying until it answers a ping or ctx
// ends (a booting guest's agent answers once its init has switched root).
// It returns the client and the agent's Info.
func Dial(ctx context.Context, dial DialFunc, o DialOptions) (*Client, Info, error) {
	if o.Attempt <= 0 {
		o.Attempt = 2 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 50 * time.Millisecond
	}
	if o.Stale <= 0 {
		o.Stale = 500 * time.Millisecond
	}
	var last error
	for {
		c, info, err := dialOnce(ctx, dial, o.Attempt)
		if err == nil {
			return c, info, nil
		}
		last = err
		pause := o.Retry
		if errors.Is(err, errStaleSession) {
			pause = o.Stale
		}
		select {
		case <-ctx.Done():
			return nil, Info{}, fmt.Errorf("agent: no answer: %w (last: %w)", ctx.Err(), last)
		case <-time.After(pause):
		}
	}
}

func dialOnce(ctx context.Context, dial DialFunc, attempt time.Duration) (*Client, Info, error) {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	conn, err := dial(actx)
	if err != nil {
		return nil, Info{}, err
	}
	c, err := NewClient(conn)
	if err != nil {
		return nil, Info{}, err
	}
	info, err := c.Ping(actx)
	if err == nil && info.SessionStreams != 1 {
		err = errStaleSession
	}
	if err != nil {
		_ = c.Close()
		return nil, Info{}, err
	}
	return c, info, nil
}

// stream is one request's stream.
type stream struct {
	st net.Conn
	fr *frameReader
	fw *frameWriter
}

// open opens a stream and sends req's header. When ctx ends, the stream's
// reads and writes fail (its deadline passes); done closes it, and the
// agent kills an exec whose stream closes before it ended.
func (c *Client) open(ctx context.Context, req request) (*stream, func(), error) {
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Unix(1, 0)) })
	s := &stream{st: st, fr: &frameReader{r: st}, fw: &frameWriter{w: st}}
	req.Version = ProtocolVersion
	if err := s.fw.json(frameHeader, req); err != nil {
		stop()
		_ = st.Close()
		return nil, nil, c.failed(ctx, err)
	}
	done := func() {
		stop()
		_ = st.Close()
	}
	return s, done, nil
}

// answer reads the server's response header.
func (c *Client) answer(ctx context.Context, s *stream) (response, error) {
	var resp response
	if err := s.fr.header(&resp); err != nil {
		return resp, c.failed(ctx, err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("%w: %s", ErrAgent, resp.Error)
	}
	return resp, nil
}

// failed words a stream's failure: ctx's error when ctx ended.
func (c *Client) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("agent: %w", ctx.Err())
	}
	return fmt.Errorf("agent: %w", err)
}

// Ping asks the agent for its Info.
func (c *Client) Ping(ctx context.Context) (Info, error) {
	s, done, err := c.open(ctx, request{Op: opPing})
	if err != nil {
		return Info{}, err
	}
	defer done()
	resp, err := c.answer(ctx, s)
	if err != nil {
		return Info{}, err
	}
	if resp.Info == nil {
		return Info{}, errors.New("agent: a ping answered without info")
	}
	return *resp.Info, nil
}
