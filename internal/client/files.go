package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/vesselhost/vessel/internal/api"
)

// PushFile writes r's bytes to path (absolute) in an instance, owned and
// moded as o says; the path holds its old content or all of the new one.
func (c *Client) PushFile(ctx context.Context, name, path string, r io.Reader, o api.FilePush) error {
	u := c.base + "/1.0/instances/" + esc(name) + "/files?path=" + url.QueryEscape(path)
	req, err := http.NewRequestWithContext(ctx, "POST", u, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(api.FileUIDHeader, strconv.FormatUint(uint64(o.UID), 10))
	req.Header.Set(api.FileGIDHeader, strconv.FormatUint(uint64(o.GID), 10))
	if o.Mode != 0 {
		req.Header.Set(api.FileModeHeader, strconv.FormatUint(uint64(o.Mode), 8))
	}
	_, err = c.send(req, nil)
	return err
}
