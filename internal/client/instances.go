package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
)

// Instances lists every instance.
func (c *Client) Instances(ctx context.Context) ([]api.Instance, error) {
	var out []api.Instance
	_, err := c.do(ctx, "GET", "/1.0/instances", nil, &out)
	return out, err
}

// Instance returns one instance with its live usage.
func (c *Client) Instance(ctx context.Context, name string) (api.Instance, error) {
	var out api.Instance
	_, err := c.do(ctx, "GET", "/1.0/instances/"+esc(name), nil, &out)
	return out, err
}

// CreateInstance creates (and with req.Start, starts) an instance.
func (c *Client) CreateInstance(ctx context.Context, req api.InstancesPost) (*Operation, error) {
	return c.async(ctx, "POST", "/1.0/instances", req)
}

// UpdateInstanceState starts, stops or restarts an instance.
func (c *Client) UpdateInstanceState(ctx context.Context, name string, req api.InstanceStatePut) (*Operation, error) {
	return c.async(ctx, "PUT", "/1.0/instances/"+esc(name)+"/state", req)
}

// DeleteInstance deletes an instance; force kills a running one first.
func (c *Client) DeleteInstance(ctx context.Context, name string, force bool) (*Operation, error) {
	path := "/1.0/instances/" + esc(name)
	if force {
		path += "?force=1"
	}
	return c.async(ctx, "DELETE", path, nil)
}

// Logs copies an instance's console log to w; follow keeps streaming.
func (c *Client) Logs(ctx context.Context, name string, follow bool, w io.Writer) error {
	path := "/1.0/instances/" + esc(name) + "/logs"
	if follow {
		path += "?follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach vesseld: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if _, err := decodeResponse(resp, nil); err != nil {
			return err
		}
		return fmt.Errorf("logs: %s", resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// MigrateInstance asks this host to move (or copy) an instance to a peer.
func (c *Client) MigrateInstance(ctx context.Context, name string, req api.InstanceMigratePost) (*Operation, error) {
	return c.async(ctx, "POST", "/1.0/instances/"+esc(name)+"/migrate", req)
}
