package agent

import (
	"context"
	"fmt"
	"io"
)

// FileOptions are a pushed file's mode and owner.
type FileOptions struct {
	// Mode holds permission and set-id bits (0o644 when zero).
	Mode uint32
	UID  uint32
	GID  uint32
}

// PushFile writes r's bytes to path in the guest (absolute), atomically:
// the path holds its old content or all of the new one, fsynced.
func (c *Client) PushFile(ctx context.Context, path string, r io.Reader, o FileOptions) error {
	s, done, err := c.open(ctx, request{Op: opPush, File: &fileRequest{Path: path, Mode: o.Mode, UID: o.UID, GID: o.GID}})
	if err != nil {
		return err
	}
	defer done()
	if _, err := copyData(s.fw, frameData, r); err != nil {
		return c.failed(ctx, fmt.Errorf("push %s: %w", path, err))
	}
	_, err = c.answer(ctx, s)
	return err
}

// PullFile copies a regular file at path in the guest to w and returns its
// metadata.
func (c *Client) PullFile(ctx context.Context, path string, w io.Writer) (FileInfo, error) {
	s, done, err := c.open(ctx, request{Op: opPull, File: &fileRequest{Path: path}})
	if err != nil {
		return FileInfo{}, err
	}
	defer done()
	resp, err := c.answer(ctx, s)
	if err != nil {
		return FileInfo{}, err
	}
	if resp.File == nil {
		return FileInfo{}, fmt.Errorf("agent: pull %s: answered without metadata", path)
	}
	for {
		t, b, err := s.fr.next()
		if err != nil {
			return FileInfo{}, c.failed(ctx, unexpected(err))
		}
		if t != frameData {
			return FileInfo{}, fmt.Errorf("agent: pull %s: frame %q", path, t)
		}
		if len(b) == 0 {
			return *resp.File, nil
		}
		if _, err := w.Write(b); err != nil {
			return FileInfo{}, fmt.Errorf("agent: pull %s: %w", path, err)
		}
	}
}
