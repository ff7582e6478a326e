package client

import (
	"context"
	"io"
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
)

// Images lists every image.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var out []api.Image
	_, err := c.do(ctx, "GET", "/1.0/images", nil, &out)
	return out, err
}

// Image returns one image by alias or fingerprint.
func (c *Client) Image(ctx context.Context, ref string) (api.Image, error) {
	var out api.Image
	_, err := c.do(ctx, "GET", "/1.0/images/"+esc(ref), nil, &out)
	return out, err
}

// ImportImage uploads an image file: a rootfs tarball or a tarred OCI
// image layout, optionally compressed.
func (c *Client) ImportImage(ctx context.Context, r io.Reader, alias string) (api.Image, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/1.0/images", r)
	if err != nil {
		return api.Image{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if alias != "" {
		req.Header.Set(api.ImageAliasHeader, alias)
	}
	var out api.Image
	_, err = c.send(req, &out)
	return out, err
}

// BuildImage builds an image on the host (debootstrap, or the built-in).
func (c *Client) BuildImage(ctx context.Context, req api.ImageBuildPost) (*Operation, error) {
	return c.async(ctx, "POST", "/1.0/images/build", req)
}

// DeleteImage deletes an image.
func (c *Client) DeleteImage(ctx context.Context, ref string) error {
	_, err := c.do(ctx, "DELETE", "/1.0/images/"+esc(ref), nil, nil)
	return err
}
