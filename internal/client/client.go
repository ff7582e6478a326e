// Package client talks to a vessel daemon's REST API. The CLI uses only
// this package and package api; it never imports daemon internals.
//
// A Client is bound to one remote: the local daemon's unix socket, or
// (with live migration) another host over HTTPS.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/vesselhost/vessel/internal/api"
)

// Error is an error reply from the daemon.
type Error struct {
	// Code is the HTTP status (400 bad input, 404 unknown, 409 conflict...).
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

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
	// base is the URL prefix of requests ("http://vessel" over a socket).
	base string
	// dial opens raw connections, for websockets.
	dial func(ctx context.Context) (net.Conn, error)
}

// NewUnix returns a client of the daemon listening on a unix socket.
func NewUnix(socket string) *Client {
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{http: &http.Client{Transport: tr}, base: "http://vessel", dial: dial}
}

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

// Storage returns the storage pool's description and usage.
func (c *Client) Storage(ctx context.Context) (api.StoragePool, error) {
	var p api.StoragePool
	_, err := c.do(ctx, "GET", "/1.0/storage", nil, &p)
	return p, err
}
