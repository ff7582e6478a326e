package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one client can hold of the server: how long it may take
// to send a request and read the reply, how long an idle connection stays
// open, and how many connections are served at once. They are what stops a
// slow-loris client (a body trickled a byte at a time) or a connection flood
// from holding the server.
//
// The timeouts are per request. Routes whose work is long by nature (exec,
// a followed console log, an image upload, an operation wait, a peer's
// migration session) lift them for their own request once the caller is
// authenticated (route.long), so only trusted callers ever hold a
// connection longer than ReadTimeout/WriteTimeout.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers (and the TLS
	// handshake before them).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of the
	// reply (so also the work of a synchronous handler).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration
	// MaxConns caps the connections served at once on one listener;
	// more wait in the kernel's accept queue until one closes. 0: no cap.
	MaxConns int
}

// Default limits. A control request's body is small JSON (MaxJSONBody);
// sending it takes milliseconds, so 30 s is generous.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConns          = 1024
	// MaxJSONBody bounds the JSON body of a control request; a longer
	// one is refused with 413.
	MaxJSONBody = 1 << 20
	// MaxExecFrame bounds one websocket message a client sends to an exec
	// session (stdin, resize); a longer one closes the session.
	MaxExecFrame = 1 << 20
)

// DefaultLimits returns the limits vesseld uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxConns:          DefaultMaxConns,
	}
}

// NewHTTPServer returns an HTTP server of handler with the timeouts of l.
// Serve it on Listen(ln, l) so that l.MaxConns applies too.
func NewHTTPServer(handler http.Handler, l Limits) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
}

// Listen returns ln capped at l.MaxConns open connections (ln itself when
// there is no cap).
func Listen(ln net.Listener, l Limits) net.Listener {
	if l.MaxConns <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, l.MaxConns), done: make(chan struct{})}
}

// limitListener accepts a connection only while fewer than cap(sem) are
// open: Accept waits for a slot first, so the connections beyond the cap
// stay in the kernel's accept queue (they are not refused) and are served
// as soon as others close. This is golang.org/x/net/netutil.LimitListener,
// kept here rather than adding that module for 40 lines.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// limitRequest bounds a request's body and deadlines by its route: a control
// request's JSON body to MaxJSONBody; a long route (already authenticated
// when this runs) gets no deadlines, so an exec session, a followed log or
// a migration stream is not cut by the server's timeouts.
func (s *Server) limitRequest(w http.ResponseWriter, r *http.Request, rt route) {
	if !rt.rawBody {
		r.Body = http.MaxBytesReader(w, r.Body, MaxJSONBody)
	}
	if rt.long {
		rc := http.NewResponseController(w)
		// Errors mean the connection has no deadlines to lift (a test
		// recorder): nothing to do.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
	}
}
