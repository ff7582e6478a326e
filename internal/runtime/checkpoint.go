package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// CheckpointOptions configure a checkpoint.
type CheckpointOptions struct {
	// ImagePath receives the checkpoint images (created if missing).
	ImagePath string
	// WorkPath receives CRIU's dump.log (default: ImagePath).
	WorkPath string
	// LeaveRunning keeps the container running after the dump; otherwise
	// it is killed and runc forgets it (its shim records the exit).
	LeaveRunning bool
	// TCPEstablished dumps established TCP connections.
	TCPEstablished bool

	// Pages, if set, receives the memory page files as CRIU writes them:
	// imgstream.Capture FIFOs stand in the images directory under the page
	// files' names, and Run returns once the sink has stored every page
	// file CRIU wrote. PageFiles is how many FIFOs (0: one per process in
	// the container's cgroup, plus DefaultSparePageFiles); page files
	// beyond them are written by CRIU itself, as are all of them without
	// Pages. Ignored with Lazy.
	Pages     imgstream.Sink
	PageFiles int
	// Lazy leaves the memory to a page server CRIU starts after the dump,
	// on a free loopback port (post-copy): Run returns once the other
	// images are written and the page server listens (PageServer), Wait
	// once the page server has ended.
	Lazy bool
	// Background writes the memory after the container runs again (CRIU's
	// --background-memory, vessel's patch 0012), when Criu has it (see
	// Runtime.BackgroundMemory; otherwise the dump is a plain one): Run
	// returns once CRIU has write-protected the memory and let go of the
	// tasks (a cgroup frozen before Run may be thawed then), Wait once
	// every page of the frozen instant is written (and, with Pages,
	// stored). Not with Lazy.
	Background bool
	// DirectPages, with Background, lets CRIU write the page images
	// itself, with O_DIRECT and several writes in flight (vessel's patch
	// 0041, when Criu has it: Runtime.DirectWritePages), instead of
	// through Pages: no FIFO, no copy into and out of it. The page files
	// are durable when Wait returns (Checkpoint.Pages names them);
	// Written counts the space they were given so far; Abort stops the
	// write through a pipe CRIU inherits. Where Criu lacks it, or the dump
	// goes through runc, Pages is used as without it.
	DirectPages bool
}

// DefaultSparePageFiles is how many page-file FIFOs a capture prepares
// beyond one per process: shared memory segments get page files of their
// own.
const DefaultSparePageFiles = 32

// releaseTimeout bounds the wait for CRIU to let go of the tasks after an
// abort.
const releaseTimeout = 30 * time.Second

// Checkpoint is one CRIU dump of a running container: a checkpoint
// session. NewCheckpoint does everything that can happen while the
// container still runs (CRIU's service started, its dump request built
// from runc's state file, the page FIFOs in place, the page server's port
// chosen); Run is the part for the frozen window. Freeze the container's
// cgroup between the two, or not: CRIU freezes it itself otherwise, and
// puts a cgroup it found frozen back to frozen.
//
// States and the calls they allow:
//
//   - prepared (NewCheckpoint): Run, Close, Abort.
//   - running (in Run): Written, Abort, Wait.
//   - serving (Lazy or Background, Run returned): Wait, Abort; PageConn
//     (Lazy), Written (Background).
//   - done (the dump ended): Pages, Written, Wait; Abort and Close do
//     nothing.
//   - closed (Close or Abort before Run): nothing; Run and Wait fail.
type Checkpoint struct {
	id   string
	ctx  context.Context
	opts CheckpointOptions // with defaults filled in

	svc       *criuService       // a direct dump's CRIU, or nil
	req       *rpc.CriuOpts      // a direct dump's request
	runc      func() error       // the `runc checkpoint` fallback, or nil
	capture   *imgstream.Capture // Pages: the page files' FIFOs
	lazy      *lazyDump          // Lazy: page server and status pipe
	bg        *bgDump            // Background (and supported): status pipe
	written   atomic.Int64       // bytes handed to Pages
	log       *slog.Logger       // laps of the dump (debug)
	stopAbort func() bool        // unhooks a direct background dump's abort from ctx

	mu       sync.Mutex
	state    checkpointState
	returned chan struct{} // closed when Run returns
	done     chan struct{} // closed when the dump has ended
	err      error         // the dump's result, once done
	pages    []string      // the page files Pages stored, once done
	parent   string        // the last PreDump's directory, or ""
}

// checkpointState is where a Checkpoint is in its life (see Checkpoint).
type checkpointState int

const (
	checkpointPrepared checkpointState = iota
	checkpointRunning
	checkpointServing
	checkpointDone
	checkpointClosed
)

// NewCheckpoint prepares a checkpoint session of the running container id
// (see Checkpoint). Nothing is dumped yet; the caller Runs it, or Closes
// it.
//
// ctx is the session's: cancelling it aborts a page capture (CRIU's next
// write to a FIFO fails and CRIU lets go of the tasks; Run returns an
// error wrapping context.Canceled). CRIU itself is never killed, as it
// would leave the tasks seized: without Pages nothing interrupts a dump
// under way, and a lazy dump's page server ends only by Abort or by its
// client (the restored container may depend on it).
//
// When runc's state is not one a direct dump understands, or without
// LeaveRunning, Run runs `runc checkpoint` instead.
func (r *Runtime) NewCheckpoint(ctx context.Context, id string, o CheckpointOptions) (_ *Checkpoint, err error) {
	if o.PageFiles < 0 {
		return nil, fmt.Errorf("%w: %d page files", ErrInvalid, o.PageFiles)
	}
	if err := r.checkCheckpoint(id, &o); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrCheckpoint, id, err)
	}
	c := &Checkpoint{id: id, ctx: ctx, opts: o, log: r.cfg.Log, returned: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
			err = fmt.Errorf("%w %s: %w", ErrCheckpoint, id, err)
		}
	}()
	if o.Lazy && o.Background {
		return nil, fmt.Errorf("%w: a lazy dump cannot write its memory in the background", ErrInvalid)
	}
	if o.Lazy {
		if c.lazy, err = newLazyDump(o.WorkPath); err != nil {
			return nil, err
		}
	}
	if o.Background && r.BackgroundMemory() {
		if c.bg, err = newBgDump(o.WorkPath, o.DirectPages && r.DirectWritePages()); err != nil {
			return nil, err
		}
	}
	// A state that is not runc 1.1's (st == nil) or a dump only runc can
	// do is errNoDirectDump: runc checkpoint.
	st, direct := r.readRuncState(id)
	if direct == nil {
		c.req, direct = dumpRequest(st, o, c.lazy.opts())
	}
	if direct == nil {
		if yard := r.cgroupYard(); yard != "" {
			c.req.CgroupYard = proto.String(yard)
		}
	}
	if direct == nil && c.bg != nil {
		c.bg.setOpts(c.req)
	}
	switch {
	case errors.Is(direct, errNoDirectDump) && o.Lazy:
		// runc cannot hand CRIU the page server's socket.
		return nil, fmt.Errorf("post-copy needs a direct dump: %w", direct)
	case errors.Is(direct, errNoDirectDump):
		r.cfg.Log.Debug("runc checkpoint instead of a direct dump", "id", id, "err", direct)
		c.req, c.runc = nil, func() error { return r.runcCheckpoint(id, o) }
		if c.bg != nil { // runc cannot ask for it: a plain dump
			c.bg.close()
			c.bg = nil
		}
	case direct != nil:
		return nil, direct
	case o.Lazy:
		if c.svc, err = startCriuService(r.cfg.Criu, o.ImagePath, o.WorkPath, c.lazy.criu); err != nil {
			return nil, err
		}
		c.lazy.closeFile(&c.lazy.criu) // CRIU has it
	case c.bg != nil && c.bg.direct:
		if c.svc, err = startCriuService(r.cfg.Criu, o.ImagePath, o.WorkPath, c.bg.ar); err != nil {
			return nil, err
		}
		c.bg.closeFile(&c.bg.ar) // CRIU has it
		// A cancelled session stops CRIU's write as a broken FIFO would.
		c.stopAbort = context.AfterFunc(ctx, c.bg.abort)
	default:
		if c.svc, err = startCriuService(r.cfg.Criu, o.ImagePath, o.WorkPath); err != nil {
			return nil, err
		}
	}
	if o.Pages != nil && !o.Lazy && (c.bg == nil || !c.bg.direct) {
		if err := c.startCapture(r, st); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Checkpoint dumps the running container in one call: NewCheckpoint, Run
// and, with Lazy, Wait (so it returns once the page server has ended).
func (r *Runtime) Checkpoint(ctx context.Context, id string, o CheckpointOptions) error {
	c, err := r.NewCheckpoint(ctx, id, o)
	if err != nil {
		return err
	}
	if err := c.Run(); err != nil {
		return err
	}
	return c.Wait()
}

// Run dumps the container. Without Lazy it returns once CRIU has exited
// and, with Pages, every page file CRIU wrote is stored; a sink's failure
// is then the error reported (CRIU's broken pipe is only its consequence),
// and a cancelled ctx an error wrapping ctx.Err(). With Lazy it returns
// once the page server is ready, or with CRIU's error and log if the dump
// ended first. On failure the error carries the error lines of CRIU's log.
// Run can run once.
func (c *Checkpoint) Run() error {
	c.mu.Lock()
	switch c.state {
	case checkpointPrepared:
		c.state = checkpointRunning
	case checkpointClosed:
		c.mu.Unlock()
		return fmt.Errorf("%w %s: run after close", ErrCheckpoint, c.id)
	default:
		c.mu.Unlock()
		return fmt.Errorf("%w %s: already run", ErrCheckpoint, c.id)
	}
	c.mu.Unlock()
	defer close(c.returned)
	if err := c.ctx.Err(); err != nil {
		c.release()
		err = fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, err)
		c.end(err, nil)
		return err
	}
	if c.lazy != nil {
		return c.runLazy()
	}
	if c.bg != nil {
		return c.runBackground()
	}
	pages, err := c.dumpAndCapture()
	c.end(err, pages)
	return err
}

// dumpAndCapture runs the dump and ends the page capture: the page files
// stored, and the dump's result.
func (c *Checkpoint) dumpAndCapture() ([]string, error) {
	t0 := time.Now()
	err := c.dump()
	c.log.Debug("checkpoint criu returned", "id", c.id, "after", time.Since(t0))
	var pages []string
	var cerr error
	if c.capture != nil {
		pages, cerr = c.capture.Finish()
		c.log.Debug("checkpoint pages stored", "id", c.id, "after", time.Since(t0))
	}
	if err = c.copyResult(err, cerr); err != nil {
		pages = nil
	}
	return pages, err
}

// copyResult is the outcome of a dump whose CRIU (or runc) returned err
// and whose capture returned cerr: the cause, not its consequences.
func (c *Checkpoint) copyResult(err, cerr error) error {
	switch {
	case err == nil && cerr == nil:
		return nil
	case c.ctx.Err() != nil:
		// Cancelled: the capture was aborted, and CRIU's broken pipe
		// followed.
		return fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, c.ctx.Err())
	case errors.Is(cerr, imgstream.ErrAborted):
		// Abort, likewise.
		return fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, cerr)
	case c.bg != nil && c.bg.aborted.Load():
		// Abort of CRIU's own direct write.
		return fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, imgstream.ErrAborted)
	case cerr != nil:
		// The sink failed (a full disk, a lost connection) and aborted
		// the capture.
		return fmt.Errorf("%w %s: store the memory pages: %w", ErrCheckpoint, c.id, cerr)
	}
	return err
}

// dump runs CRIU (or runc), synchronously.
func (c *Checkpoint) dump() error {
	if c.runc != nil {
		return c.runc()
	}
	err := c.svc.dumpCall(c.req)
	if err == nil {
		// CRIU has answered: the images are complete. Its exit can
		// take tens of milliseconds more (closing the userfaultfds of
		// pre-copy's tracked memory un-protects every page of it: ~30
		// ms at 2 GiB), which nothing needs to wait for frozen.
		go func() {
			if err := c.svc.close(); err != nil {
				c.log.Warn("criu exited badly after its dump answered", "id", c.id, "err", err)
			}
		}()
		return nil
	}
	_ = c.svc.close()
	return fmt.Errorf("%w %s: criu dump: %w", ErrCheckpoint, c.id,
		criuFailure(err, filepath.Join(c.opts.WorkPath, "dump.log")))
}

// end records the dump's result.
func (c *Checkpoint) end(err error, pages []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.err, c.pages = checkpointDone, err, pages
	close(c.done)
	if c.stopAbort != nil {
		c.stopAbort()
	}
}

// Wait returns the dump's result: with Lazy once the page server has
// ended (its client fetched every page, or Abort hung up), otherwise at
// once, Run's result. It fails for a checkpoint that was never run.
func (c *Checkpoint) Wait() error {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st == checkpointPrepared || st == checkpointClosed {
		return fmt.Errorf("%w %s: wait for a checkpoint that was not run", ErrCheckpoint, c.id)
	}
	<-c.done
	return c.err
}

// PageConn returns vessel's end of a lazy dump's page server socket (nil
// without Lazy): the caller connects the target's lazy-pages daemon to it,
// and closing it ends the page server as a client that has every page
// does. Only this process holds it: no port, no path.
func (c *Checkpoint) PageConn() net.Conn {
	if c.lazy == nil {
		return nil
	}
	return c.lazy.conn
}

// Pages returns the names of the page files the Pages sink stored, once
// the dump has ended successfully ("pages-1.img", ...; CRIU wrote any
// others itself into the images directory). A DirSink made them durable
// already: they are what imgstream.SyncImages may skip.
func (c *Checkpoint) Pages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pages)
}

// Written returns how many bytes have been handed to the Pages sink so
// far (with CRIU's direct writes, the space its page files were given):
// the progress of a dump, safe to call while Run runs.
func (c *Checkpoint) Written() int64 {
	if c.bg != nil && c.bg.direct {
		return c.directWritten()
	}
	return c.written.Load()
}

// Abort ends a dump nobody will finish, in any state: before Run it is
// Close; during a page capture the capture is aborted (CRIU's next write
// fails); a lazy dump's page server is hung up on (PageConn closed), as
// by a client that has every page, so that CRIU lets go of the tasks. It
// waits up to 30 s for the dump to end (Run and Wait then return). A
// container frozen before Run stays frozen. Idempotent.
func (c *Checkpoint) Abort() {
	if c.closePrepared() {
		return
	}
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st == checkpointDone || st == checkpointClosed {
		return
	}
	deadline := time.NewTimer(releaseTimeout)
	defer deadline.Stop()
	if c.capture != nil {
		c.capture.Abort()
	}
	c.bg.abort()
	if c.lazy != nil || c.bg != nil {
		select {
		case <-c.returned: // the page server listens, the tasks run, or the dump is over
		case <-deadline.C:
			return
		}
		c.mu.Lock()
		serving := c.state == checkpointServing
		c.mu.Unlock()
		if serving && c.lazy != nil {
			c.lazy.hangUp()
		}
	}
	select {
	case <-c.done:
	case <-deadline.C:
	}
}

// Close releases a checkpoint that was never run: it stops the CRIU
// service, closes its descriptors and the status pipe, and removes the
// FIFOs. It does nothing after Run. Idempotent.
func (c *Checkpoint) Close() { c.closePrepared() }

// closePrepared closes a checkpoint still prepared, and tells whether it
// did.
func (c *Checkpoint) closePrepared() bool {
	c.mu.Lock()
	if c.state != checkpointPrepared {
		c.mu.Unlock()
		return false
	}
	c.state = checkpointClosed
	c.mu.Unlock()
	c.release()
	return true
}

// release frees what NewCheckpoint set up for a dump that will not run.
func (c *Checkpoint) release() {
	if c.svc != nil {
		_ = c.svc.close()
	}
	if c.capture != nil {
		c.capture.Abort()
	}
	if c.lazy != nil {
		c.lazy.close()
	}
	if c.stopAbort != nil {
		c.stopAbort()
	}
	if c.bg != nil {
		c.bg.close()
	}
}
