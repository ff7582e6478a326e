package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
)

// Upgrade opens a raw bidirectional stream to an HTTPS remote: an HTTP/1.1
// request to path upgraded to protocol (the migration session). An error
// reply is returned as *Error.
func (c *Client) Upgrade(ctx context.Context, path, protocol string) (net.Conn, error) {
	return c.UpgradeWith(ctx, path, protocol, nil)
}

// UpgradeWith is Upgrade with the raw TCP connection under TLS wrapped by
// raw (if not nil): the page link buffers its TLS records there.
func (c *Client) UpgradeWith(ctx context.Context, path, protocol string, raw func(net.Conn) net.Conn) (net.Conn, error) {
	if c.tls == nil {
		return nil, fmt.Errorf("upgrade: %s is not an HTTPS remote", c.base)
	}
	tcp, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Address())
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.Address(), err)
	}
	if raw != nil {
		tcp = raw(tcp)
	}
	cfg := c.tls.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(c.Address())
		cfg.ServerName = host
	}
	conn := tls.Client(tcp, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		tcp.Close()
		return nil, fmt.Errorf("connect to %s: %w", c.Address(), err)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("upgrade request: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("upgrade reply: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		defer resp.Body.Close()
		if _, err := decodeResponse(resp, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("upgrade refused: %s", resp.Status)
	}
	return &bufConn{Conn: conn, r: br}, nil
}

// bufConn is a connection whose first bytes may already sit in a reader.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the TLS connection (close_notify).
func (b *bufConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Close()
}
