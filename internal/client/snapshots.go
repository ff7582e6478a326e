package client

import (
	"context"

	"github.com/vesselhost/vessel/internal/api"
)

func snapshotsPath(name string) string { return "/1.0/instances/" + esc(name) + "/snapshots" }

// Snapshots lists an instance's snapshots, oldest first.
func (c *Client) Snapshots(ctx context.Context, name string) ([]api.Snapshot, error) {
	var out []api.Snapshot
	_, err := c.do(ctx, "GET", snapshotsPath(name), nil, &out)
	return out, err
}

// Snapshot returns one snapshot.
func (c *Client) Snapshot(ctx context.Context, name, snap string) (api.Snapshot, error) {
	var out api.Snapshot
	_, err := c.do(ctx, "GET", snapshotsPath(name)+"/"+esc(snap), nil, &out)
	return out, err
}

// CreateSnapshot snapshots an instance (its disk, and with req.Stateful its
// memory and processes).
func (c *Client) CreateSnapshot(ctx context.Context, name string, req api.SnapshotsPost) (*Operation, error) {
	return c.async(ctx, "POST", snapshotsPath(name), req)
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, name, snap string) (*Operation, error) {
	return c.async(ctx, "DELETE", snapshotsPath(name)+"/"+esc(snap), nil)
}

// RestoreSnapshot rolls an instance back to a snapshot.
func (c *Client) RestoreSnapshot(ctx context.Context, name, snap string, req api.SnapshotRestorePost) (*Operation, error) {
	return c.async(ctx, "POST", snapshotsPath(name)+"/"+esc(snap)+"/restore", req)
}
