package daemon

import (
	"sync/atomic"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
)

// progressInterval is how often a running transfer publishes its progress.
const progressInterval = 250 * time.Millisecond

// progress publishes the progress of one transfer (a disk pass, a memory
// image) in its operation's metadata: api.MetaBytes and api.MetaRate,
// every progressInterval until end. The same keys serve snapshots and
// migrations, so a client reads them the same way.
type progress struct {
	op    *operations.Operation
	bytes atomic.Int64
	count func() int64 // where the bytes are counted; nil: by Write
	stop  chan struct{}
	done  chan struct{}
}

// startProgress sets meta and starts publishing. count reads the bytes
// moved so far from elsewhere (a checkpoint's sink); with nil, the
// progress counts what is written to it (it is an io.Writer, for
// io.MultiWriter).
func startProgress(op *operations.Operation, meta map[string]any, count func() int64) *progress {
	p := &progress{op: op, count: count, stop: make(chan struct{}), done: make(chan struct{})}
	if p.count == nil {
		p.count = p.bytes.Load
	}
	op.SetMetadata(meta)
	go func() {
		defer close(p.done)
		start := time.Now()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				n := p.count()
				rate := float64(n) / time.Since(start).Seconds()
				op.SetMetadata(map[string]any{api.MetaBytes: n, api.MetaRate: int64(rate)})
			}
		}
	}()
	return p
}

// Write counts bytes.
func (p *progress) Write(b []byte) (int, error) {
	p.bytes.Add(int64(len(b)))
	return len(b), nil
}

// end stops publishing and returns the bytes moved.
func (p *progress) end() int64 {
	close(p.stop)
	<-p.done
	n := p.count()
	p.op.SetMetadata(map[string]any{api.MetaBytes: n})
	return n
}
