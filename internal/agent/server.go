package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// Server answers the requests of one host over sessions it is given.
type Server struct {
	// Root is the directory commands run chrooted to and files are pushed
	// to and pulled from: /proc/1/root in a guest. Empty means "/" with
	// no chroot.
	Root string
	// Version is the agent's version, as Info reports it.
	Version string
	// ReadyAfter is the guest's uptime when the agent became ready.
	ReadyAfter time.Duration
	// Init is the command the guest's init was switched to.
	Init string
	// Log receives what goes wrong in a request; nil discards it.
	Log *slog.Logger
}

// yamuxConfig is both ends' session configuration: yamux's defaults,
// its log silenced (errors reach the caller).
func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	return c
}

// ServeConn runs one session over conn until it ends (the host closes it,
// or a protocol error), then closes conn. Each stream is served
// concurrently.
func (s *Server) ServeConn(conn io.ReadWriteCloser) error {
	sess, err := yamux.Server(conn, yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("agent session: %w", err)
	}
	defer func() { _ = sess.Close() }()
	for n := uint64(1); ; n++ {
		st, err := sess.AcceptStream()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, yamux.ErrSessionShutdown) {
				return nil
			}
			return fmt.Errorf("agent session: %w", err)
		}
		go s.serveStream(st, n)
	}
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// serveStream answers the request a stream carries; it is the session's
// nth.
func (s *Server) serveStream(st net.Conn, n uint64) {
	defer func() { _ = st.Close() }()
	fr := &frameReader{r: st}
	fw := &frameWriter{w: st}
	var req request
	if err := fr.header(&req); err != nil {
		s.log().Warn("agent: bad request", "err", err)
		return
	}
	if req.Version != ProtocolVersion {
		_ = fw.json(frameHeader, response{Version: ProtocolVersion,
			Error: fmt.Sprintf("protocol version %d, the agent speaks %d", req.Version, ProtocolVersion)})
		return
	}
	var err error
	switch req.Op {
	case opPing:
		info := s.info()
		info.SessionStreams = n
		err = fw.json(frameHeader, response{Version: ProtocolVersion, Info: info})
	case opExec:
		err = s.exec(fr, fw, req.Exec)
	case opPush:
		err = s.push(fr, fw, req.File)
	case opPull:
		err = s.pull(fw, req.File)
	default:
		err = fw.json(frameHeader, response{Version: ProtocolVersion, Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
	if err != nil {
		s.log().Warn("agent: request failed", "op", req.Op, "err", err)
	}
}

// fail answers a request with an error.
func fail(fw *frameWriter, err error) error {
	if werr := fw.json(frameHeader, response{Version: ProtocolVersion, Error: err.Error()}); werr != nil {
		return werr
	}
	return err
}

func (s *Server) info() *Info {
	in := &Info{AgentVersion: s.Version, ReadyAfter: s.ReadyAfter.Seconds(), Init: s.Init}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		in.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	in.Uptime = Uptime().Seconds()
	return in
}

// Uptime returns the time since the machine booted (CLOCK_BOOTTIME).
func Uptime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
