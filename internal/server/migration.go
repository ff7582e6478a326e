package server

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"strings"

	"github.com/vesselhost/vessel/internal/migration"
)

// acceptMigration upgrades a trusted peer's request to a migration session
// (or a move's page link) and hands the raw connection to the daemon.
func (s *Server) acceptMigration(w http.ResponseWriter, r *http.Request) error {
	proto := r.Header.Get("Upgrade")
	pages := strings.EqualFold(proto, migration.PagesProtocol)
	if !pages && !strings.EqualFold(proto, migration.UpgradeProtocol) {
		return errBadRequestf("expected Upgrade: %s", migration.UpgradeProtocol)
	}
	proto = migration.UpgradeProtocol
	if pages {
		proto = migration.PagesProtocol
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return errBadRequestf("connection cannot be upgraded")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		// The connection is in an unknown state: nothing more can be
		// written to it, so there is no error to report either.
		return nil //nolint:nilerr // see above
	}
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n\r\n")
	if err := rw.Flush(); err != nil {
		conn.Close()
		return nil //nolint:nilerr // hijacked: the peer has gone, nobody to tell
	}
	_, peer := s.core.Authenticate(peerCert(r))
	if pages {
		s.core.AcceptPageLink(peer, &readerConn{Conn: conn, r: rw.Reader})
		return nil
	}
	s.core.AcceptMigration(peer, &readerConn{Conn: conn, r: rw.Reader})
	return nil
}

// readerConn reads through the hijacked buffered reader first.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the TLS connection (close_notify).
func (c *readerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ConnectionState is the TLS state of the connection underneath (the
// daemon reads the peer's certificate from it).
func (c *readerConn) ConnectionState() tls.ConnectionState {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}
