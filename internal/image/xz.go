package image

import (
	"context"
	"fmt"
	"io"
	"os/exec"
)

// xzReader decompresses a stream through the xz tool (Go's standard library
// has no xz). Corrupt input makes Read fail with ErrInvalidImage and xz's
// stderr once the tool exits.
type xzReader struct {
	cmd    *exec.Cmd
	out    io.ReadCloser
	stderr *tailBuffer
	cancel context.CancelFunc
	done   bool
	err    error
}

// newXZReader starts `xz --decompress --stdout` reading r. Close the
// returned reader to stop the tool.
func newXZReader(ctx context.Context, r io.Reader) (*xzReader, error) {
	ctx, cancel := context.WithCancel(ctx)
	x := &xzReader{stderr: &tailBuffer{}, cancel: cancel}
	x.cmd = exec.CommandContext(ctx, "xz", "--decompress", "--stdout")
	x.cmd.Stdin = r
	x.cmd.Stderr = x.stderr
	x.cmd.WaitDelay = waitDelay
	out, err := x.cmd.StdoutPipe()
	if err == nil {
		x.out = out
		err = x.cmd.Start()
	}
	if err != nil {
		cancel()
		return nil, toolError("xz", err, "")
	}
	return x, nil
}

// Read reads decompressed bytes. At the end of xz's output it waits for xz
// and reports its failure, if any, instead of io.EOF.
func (x *xzReader) Read(p []byte) (int, error) {
	if x.done {
		return 0, x.err
	}
	n, err := x.out.Read(p)
	if err == io.EOF {
		x.done, x.err = true, io.EOF
		if werr := x.cmd.Wait(); werr != nil {
			x.err = fmt.Errorf("%w: %w", ErrInvalidImage, toolError("xz", werr, x.stderr.String()))
		}
		return n, x.err
	}
	return n, err
}

// Close stops xz if it is still running.
func (x *xzReader) Close() error {
	x.cancel()
	if !x.done {
		x.done, x.err = true, io.ErrClosedPipe
		_ = x.cmd.Wait() // killed by cancel: its status says nothing
	}
	return nil
}
