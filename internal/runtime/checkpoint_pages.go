package runtime

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// startCapture puts the page files' FIFOs in the images directory and
// starts handing what CRIU writes into them to the Pages sink, counted.
// st is runc's state, or nil when it is not runc 1.1's.
func (c *Checkpoint) startCapture(r *Runtime, st *runcState) error {
	n := c.opts.PageFiles
	if n == 0 {
		pids, err := r.containerPids(c.ctx, c.id, st)
		if err != nil {
			return fmt.Errorf("count the processes to dump: %w", err)
		}
		n = len(pids) + DefaultSparePageFiles
	}
	sink := &countingSink{sink: c.opts.Pages, n: &c.written}
	capture, err := imgstream.StartCapture(c.ctx, c.opts.ImagePath, n, sink)
	if err != nil {
		return err
	}
	c.capture = capture
	return nil
}

// containerPids lists the processes of container id: from its cgroup, or
// through `runc ps` when runc's state does not name it.
func (r *Runtime) containerPids(ctx context.Context, id string, st *runcState) ([]int, error) {
	if st != nil {
		if pids, err := st.pids(); err == nil {
			return pids, nil
		}
	}
	pids, err := r.runc.Ps(ctx, id)
	if err != nil {
		return nil, runcError("ps", id, err, ErrRunc)
	}
	return pids, nil
}

// countingSink passes files on to sink, adding the bytes read from them
// to n.
type countingSink struct {
	sink imgstream.Sink
	n    *atomic.Int64
}

// Store implements imgstream.Sink.
func (s *countingSink) Store(ctx context.Context, name string, r io.Reader) error {
	return s.sink.Store(ctx, name, &countingReader{r: r, n: s.n})
}

// countingReader adds the bytes read from r to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(int64(n))
	return n, err
}
