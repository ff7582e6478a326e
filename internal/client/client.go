// Package client talks to a vessel daemon's REST API. The CLI uses only
// this package and package api; it never imports daemon internals.
//
// A Client is bound to one remote: the local daemon's unix socket, or
// (with live migration) another host over HTTPS.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/trust"
)

// Error is an error reply from the daemon. Its message is the daemon's;
// errors.Is finds the error kind its code stands for (api.ErrInvalid for
// 400, api.ErrNotFound for 404, api.ErrConflict for 409, api.ErrForbidden
// for 403, api.ErrTooLarge for 413, context.Canceled for
// api.StatusCanceled).
type Error struct {
	// Code is the HTTP status (400 bad input, 404 unknown, 409 conflict...).
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the kind of the error's code, or nil.
func (e *Error) Unwrap() error { return kindOf(e.Code) }

// kindOf is statusFor (package server) read backwards.
func kindOf(code int) error {
	switch code {
	case http.StatusBadRequest:
		return api.ErrInvalid
	case http.StatusNotFound:
		return api.ErrNotFound
	case http.StatusConflict:
		return api.ErrConflict
	case http.StatusForbidden:
		return api.ErrForbidden
	case http.StatusRequestEntityTooLarge:
		return api.ErrTooLarge
	case api.StatusCanceled:
		return context.Canceled
	}
	return nil
}

// StatusCode returns the HTTP status of an API error, or 0.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Client is a connection to one daemon.
type Client struct {
	http *http.Client
	// base is the URL prefix of requests: "http://vessel" over a unix
	// socket, "https://HOST:PORT" for a remote host.
	base string
	// ws opens websockets (exec) the same way.
	ws *websocket.Dialer
	// tls is the pinned client configuration of an HTTPS remote.
	tls *tls.Config
}

// NewUnix returns a client of the daemon listening on a unix socket.
func NewUnix(socket string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	tr := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{http: &http.Client{Transport: tr}, base: "http://vessel", ws: &websocket.Dialer{NetDialContext: dial}}
}

// NewHTTPS returns a client of a remote host at address (host:port) whose
// certificate must have the given fingerprint; id is this side's identity
// (a CLI user's client certificate, or a host's own when it talks to a
// peer).
func NewHTTPS(address, fingerprint string, id tls.Certificate) *Client {
	cfg := trust.PinnedTLS(id, fingerprint)
	tr := &http.Transport{
		TLSClientConfig:     cfg,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	return &Client{
		http: &http.Client{Transport: tr},
		base: "https://" + address,
		ws:   &websocket.Dialer{TLSClientConfig: cfg, HandshakeTimeout: 10 * time.Second},
		tls:  cfg,
	}
}

// Address returns the host:port of an HTTPS remote ("" over a socket).
func (c *Client) Address() string { return strings.TrimPrefix(c.base, "https://") }

// do sends a request and decodes a sync reply's metadata into out (if not
// nil), or returns the async operation.
func (c *Client) do(ctx context.Context, method, path string, body any, out any) (*api.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req, out)
}

func (c *Client) send(req *http.Request, out any) (*api.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach vesseld: %w", err)
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

// decodeResponse reads an API envelope; error replies become *Error.
func decodeResponse(resp *http.Response, out any) (*api.Response, error) {
	var r api.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("bad reply from vesseld (%s): %w", resp.Status, err)
	}
	if r.Type == api.ResponseError {
		return nil, &Error{Code: r.ErrorCode, Message: r.Error}
	}
	if out != nil && len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, out); err != nil {
			return nil, fmt.Errorf("decode reply: %w", err)
		}
	}
	return &r, nil
}

// operation turns an async reply into an Operation.
func (c *Client) operation(r *api.Response) (*Operation, error) {
	if r.Type != api.ResponseAsync {
		return nil, fmt.Errorf("expected an operation, got a %q reply", r.Type)
	}
	op := &Operation{c: c}
	if err := json.Unmarshal(r.Metadata, &op.Operation); err != nil {
		return nil, fmt.Errorf("decode operation: %w", err)
	}
	return op, nil
}

func (c *Client) async(ctx context.Context, method, path string, body any) (*Operation, error) {
	r, err := c.do(ctx, method, path, body, nil)
	if err != nil {
		return nil, err
	}
	return c.operation(r)
}

func esc(s string) string { return url.PathEscape(s) }

// Server returns the daemon's and host's description.
func (c *Client) Server(ctx context.Context) (api.Server, error) {
	var s api.Server
	_, err := c.do(ctx, "GET", "/1.0", nil, &s)
	return s, err
}

// Join has this client's certificate trusted by the server, with the
// secret of a token the server issued.
func (c *Client) Join(ctx context.Context, secret string) error {
	_, err := c.do(ctx, "POST", "/1.0/certificates", api.CertificatePost{Secret: secret}, nil)
	return err
}

// Storage returns the storage pool's description and usage.
func (c *Client) Storage(ctx context.Context) (api.StoragePool, error) {
	var p api.StoragePool
	_, err := c.do(ctx, "GET", "/1.0/storage", nil, &p)
	return p, err
}
