package client

import (
	"context"

	"github.com/vesselhost/vessel/internal/api"
)

// UpdateInstance sets configuration keys of an instance (an empty value
// removes a key); limits apply live to a running instance.
func (c *Client) UpdateInstance(ctx context.Context, name string, req api.InstancePatch) (*Operation, error) {
	return c.async(ctx, "PATCH", "/1.0/instances/"+esc(name), req)
}
