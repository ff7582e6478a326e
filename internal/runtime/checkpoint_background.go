package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
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

// bgDump is a background dump's CRIU config file and status pipe.
type bgDump struct {
	config string

	mu   sync.Mutex
	r, w *os.File // status pipe; nil once closed
}

// newBgDump writes the config file that turns the mode on (an RPC request
// has no field for it) into work, and makes the status pipe.
func newBgDump(work string) (*bgDump, error) {
	bg := &bgDump{config: filepath.Join(work, "background-dump.conf")}
	if err := os.WriteFile(bg.config, []byte("background-memory\n"), 0o600); err != nil {
		return nil, err
	}
	var err error
	if bg.r, bg.w, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	return bg, nil
}

// setOpts makes opts a background dump.
func (bg *bgDump) setOpts(opts *rpc.CriuOpts) {
	// CRIU opens it as /proc/<our pid>/fd/N.
	opts.StatusFd = proto.Int32(int32(bg.w.Fd()))
	opts.ConfigFile = proto.String(bg.config)
}

// closeFile closes *f once.
func (bg *bgDump) closeFile(f **os.File) { closeOnce(&bg.mu, f) }

// close closes the status pipe.
func (bg *bgDump) close() {
	bg.closeFile(&bg.r)
	bg.closeFile(&bg.w)
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
