package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/runtime"
)

// dumpRun is a prepared, running or finished checkpoint.
type dumpRun struct {
	prepared      *runtime.PreparedCheckpoint
	capture       *imgstream.Capture // copy mode: the page files' FIFOs
	ready, readyW *os.File           // lazy mode: CRIU's status pipe
	done          chan error         // lazy mode: the dump's end (after post-copy)
	pageServer    string             // addr:port of the lazy page server
	pages         []string           // page files streamed during a copy-mode dump
	result        error
	finished      bool
}

func (r *dumpRun) wait() error {
	if !r.finished {
		r.result, r.finished = <-r.done, true
	}
	return r.result
}

// abort ends a lazy dump whose pages nobody will fetch: CRIU keeps the
// tasks seized while its page server waits for the target, so a failed
// migration connects to the page server and hangs up; CRIU then finishes
// and lets go of the (still frozen) tasks.
func (r *dumpRun) abort() {
	if r.finished || r.pageServer == "" {
		return
	}
	hangUp(r.pageServer)
	select {
	case r.result = <-r.done:
		r.finished = true
	case <-time.After(30 * time.Second):
	}
}

// hangUp connects to a lazy dump's page server and closes at once: the
// page server takes it as a lazy-pages client that has everything, and ends.
func hangUp(pageServer string) {
	if c, err := net.DialTimeout("tcp", pageServer, 5*time.Second); err == nil {
		c.Close()
	}
}

// prepareDump gets the dump ready while the container still runs: the
// CRIU service is started and its request built (runtime.PrepareCheckpoint),
// and in copy mode the page-file FIFOs wait for CRIU. Only CRIU's dump is
// left for the frozen window (dumpRun.start).
func (m *migrationSource) prepareDump(ctx context.Context, images, work string, lazy bool) (*dumpRun, error) {
	run := &dumpRun{done: make(chan error, 1)}
	opts := runtime.CheckpointOptions{ImagePath: images, WorkPath: work, LeaveRunning: true, TCPEstablished: true}
	if err := os.MkdirAll(images, 0o700); err != nil {
		return nil, err
	}
	if lazy {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		run.pageServer = "127.0.0.1:" + strconv.Itoa(port)
		if run.ready, run.readyW, err = os.Pipe(); err != nil {
			return nil, err
		}
		opts.LazyPages, opts.PageServer, opts.StatusFile = true, run.pageServer, run.readyW
	} else {
		// Copy mode: the memory pages go to the target as CRIU writes them
		// (FIFOs in place of the page files), not to this host's disk first.
		capture, err := imgstream.StartCapture(ctx, images, m.pageFiles(), &pageSink{m: m})
		if err != nil {
			return nil, err
		}
		run.capture = capture
	}
	pc, err := m.d.rt.PrepareCheckpoint(m.name, opts)
	if err != nil {
		run.release()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	run.prepared = pc
	return run, nil
}

// start dumps the (already frozen) container, leaving it frozen: CRIU puts
// a cgroup it found frozen back to frozen, so a failed migration thaws it
// and nothing was lost. With lazy pages it returns when the images are
// written and the page server is ready; the page server keeps running until
// the target has every page.
//
// CRIU runs without ctx: killing it would leave the tasks seized. A cancel
// aborts the capture instead, and CRIU's next write fails.
func (r *dumpRun) start() error {
	pc := r.prepared
	if r.ready != nil {
		go func() {
			r.done <- pc.Run()
			pc.Close()
			r.readyW.Close()
		}()
		// CRIU writes one byte when the page server is ready; EOF first
		// means the checkpoint failed.
		buf := make([]byte, 1)
		_, err := r.ready.Read(buf)
		r.ready.Close()
		if err != nil {
			r.finished, r.result = true, <-r.done
			if r.result != nil {
				return fmt.Errorf("checkpoint: %w", r.result)
			}
			return fmt.Errorf("checkpoint: CRIU never reported ready: %w", err)
		}
		return nil
	}
	err := pc.Run()
	pc.Close()
	pages, cerr := r.capture.Finish()
	r.finished = true
	switch {
	case err != nil:
		return fmt.Errorf("checkpoint: %w", err)
	case cerr != nil:
		return fmt.Errorf("stream memory pages to the target: %w", cerr)
	}
	r.pages = pages
	return nil
}

// release undoes prepareDump for a dump that never starts.
func (r *dumpRun) release() {
	if r.prepared != nil {
		r.prepared.Close()
	}
	for _, f := range []*os.File{r.ready, r.readyW} {
		if f != nil {
			f.Close()
		}
	}
	if r.capture != nil {
		_, _ = r.capture.Finish()
	}
}

// pageFiles is how many page-file FIFOs a dump needs: one per process,
// plus spares for shared memory segments.
func (m *migrationSource) pageFiles() int {
	n := captureSpare
	if cg, err := m.d.instanceCgroup(m.name); err == nil {
		if pids, err := cg.Pids(); err == nil {
			n += len(pids)
		}
	}
	return n
}

// pageSink streams each page file of a dump to the target on its own
// stream; the target acknowledges them all with the other images.
type pageSink struct{ m *migrationSource }

// Store implements imgstream.Sink.
func (p *pageSink) Store(ctx context.Context, name string, r io.Reader) error {
	st, err := p.m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPage, Name: name})
	if err != nil {
		return err
	}
	n, err := io.Copy(st, r)
	p.m.pageBytes.Add(n)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}
