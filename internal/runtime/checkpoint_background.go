package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// A background dump (CheckpointOptions.Background) is CRIU's
// --background-memory (vessel's patch 0012): while the tasks are frozen
// CRIU pins their pages and write-protects their private memory through a
// userfaultfd of each task; it then lets the tasks go, says so on the
// status pipe, and writes the pages of the frozen instant while they run
// (a task's write to a page not yet written waits until CRIU has copied
// it). Run returns at the status byte, so the caller's frozen window ends
// there; Wait at the end of the dump.

// BackgroundMemory reports whether Criu can write a dump's memory after
// the tasks run again (it knows --background-memory). Probed once.
func (r *Runtime) BackgroundMemory() bool {
	return r.criuHas("--background-memory", "criu writes a snapshot's memory while frozen (no --background-memory: run setup)")
}

// DirectWritePages reports whether Criu can write a background dump's
// page images itself with O_DIRECT (--direct-write-pages, vessel's patch
// 0041), aborted through a descriptor (--background-abort-fd). Probed once.
func (r *Runtime) DirectWritePages() bool {
	return r.criuHas("--direct-write-pages", "a snapshot's memory goes through page FIFOs (no --direct-write-pages: run setup)")
}

// bgDump is a background dump's CRIU config file and status pipe and,
// when CRIU writes the page images itself (direct), its abort pipe.
type bgDump struct {
	config string
	direct bool

	mu     sync.Mutex
	r, w   *os.File // status pipe; nil once closed
	ar, aw *os.File // direct: abort pipe (CRIU inherits ar); nil once closed

	aborted atomic.Bool // direct: the abort pipe was closed by abort
}

// abortFd is the descriptor CRIU inherits the abort pipe's read end as:
// startCriuService's first inherited file, after the RPC socket.
const abortFd = criuServiceFd + 1

// newBgDump writes the config file that turns the mode on (an RPC request
// has no field for it) into work, and makes the status pipe. With direct,
// CRIU writes the page images itself with O_DIRECT, and stops writing
// (failing the dump, dropping its write protection) once vessel closes
// the abort pipe's write end (Abort, or vessel's exit): no FIFO breaks
// for it.
func newBgDump(work string, direct bool) (*bgDump, error) {
	bg := &bgDump{config: filepath.Join(work, "background-dump.conf"), direct: direct}
	conf := "background-memory\n"
	if direct {
		conf += fmt.Sprintf("direct-write-pages\nbackground-abort-fd %d\n", abortFd)
	}
	if err := os.WriteFile(bg.config, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	var err error
	if bg.r, bg.w, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	if direct {
		if bg.ar, bg.aw, err = os.Pipe(); err != nil {
			bg.close()
			return nil, fmt.Errorf("abort pipe: %w", err)
		}
	}
	return bg, nil
}

// abort tells a direct dump's CRIU to stop writing (it sees the abort
// pipe hung up at its next look, between pieces of pages). Idempotent.
func (bg *bgDump) abort() {
	if bg == nil || !bg.direct {
		return
	}
	bg.aborted.Store(true)
	bg.closeFile(&bg.aw)
}

// setOpts makes opts a background dump.
func (bg *bgDump) setOpts(opts *rpc.CriuOpts) {
	// CRIU opens it as /proc/<our pid>/fd/N.
	opts.StatusFd = proto.Int32(int32(bg.w.Fd()))
	opts.ConfigFile = proto.String(bg.config)
}

// closeFile closes *f once.
func (bg *bgDump) closeFile(f **os.File) { closeOnce(&bg.mu, f) }

// close closes the status pipe and the abort pipe.
func (bg *bgDump) close() {
	bg.closeFile(&bg.r)
	bg.closeFile(&bg.w)
	bg.closeFile(&bg.ar)
	bg.closeFile(&bg.aw)
}

// awaitTracked blocks until CRIU reports the memory tracked and the tasks
// let go (true), or the pipe closes first: CRIU ended, or wrote the pages
// while frozen (a task it could not track the memory of does not stop the
// others').
func (bg *bgDump) awaitTracked() bool {
	bg.mu.Lock()
	r := bg.r
	bg.mu.Unlock()
	if r == nil {
		return false
	}
	n, _ := r.Read(make([]byte, 1))
	bg.closeFile(&bg.r)
	return n == 1
}

// runBackground runs a background dump: the dump and the page capture in
// a goroutine, Run's return at CRIU's status byte.
func (c *Checkpoint) runBackground() error {
	go func() {
		pages, err := c.dumpAndCapture()
		// Our copy of the write end: without it the pipe reports EOF once
		// CRIU has exited, whatever it wrote.
		c.bg.closeFile(&c.bg.w)
		if c.bg.direct {
			c.bg.closeFile(&c.bg.aw)
			if err == nil {
				pages, err = c.syncDirectPages()
			}
		}
		c.end(err, pages)
	}()
	if c.bg.awaitTracked() {
		c.mu.Lock()
		if c.state == checkpointRunning {
			c.state = checkpointServing
		}
		c.mu.Unlock()
		return nil
	}
	<-c.done
	return c.err
}

// Background reports whether the dump writes its memory after the thaw
// (CheckpointOptions.Background, and Criu has it).
func (c *Checkpoint) Background() bool { return c.bg != nil }

// syncDirectPages makes the page images a direct dump's CRIU wrote durable
// (its direct writes are on the device, their extents not yet: what
// DirSink's Store does for a captured file) and returns their names, for
// imgstream.SyncImages to skip.
func (c *Checkpoint) syncDirectPages() ([]string, error) {
	pages, err := imgstream.SyncPages(c.opts.ImagePath)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, err)
	}
	return pages, nil
}

// directWritten is the progress of a direct dump's memory write: the
// space allocated to its page images so far (their size is set before
// the first write; the holes take none).
func (c *Checkpoint) directWritten() int64 {
	n, _ := imgstream.PagesAllocated(c.opts.ImagePath)
	return n
}
