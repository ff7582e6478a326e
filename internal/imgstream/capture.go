package imgstream

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// fifoSize is the pipe buffer asked for each FIFO: CRIU can run this far
// ahead of the sink's writes. (Capped by fs.pipe-max-size; a refusal keeps
// the 64 KiB default.)
const fifoSize = 8 << 20

// Capture takes the page files of one CRIU dump into a Sink through FIFOs
// in the images directory (see the package documentation).
//
// Use: StartCapture before the dump, then Finish once CRIU has exited
// (whatever its outcome), or Abort to make CRIU's writes fail at once.
type Capture struct {
	dir    string
	sink   Sink
	fifos  []*fifo
	wg     sync.WaitGroup
	parent context.Context // StartCapture's
	cancel context.CancelFunc

	mu       sync.Mutex
	err      error // the first Store error
	aborted  bool
	cause    error // why the context ended, if that aborted the capture
	finished bool
	captured []string
}

// fifo is one prepared page file name and our read end of it.
type fifo struct {
	name   string
	path   string
	f      *os.File
	opened bool // CRIU opened it (set by its reader goroutine)
}

// StartCapture creates the FIFOs pages-1.img ... pages-N.img in dir (CRIU
// numbers page files from 1 in the order it dumps them) and starts
// reading each into sink as soon as CRIU opens it. n should be at least
// the number of page files the dump will write: one per process plus one
// per shared memory segment; more are harmless. If ctx ends before
// Finish, the capture is aborted and Finish's error wraps ErrAborted and
// ctx's cause.
func StartCapture(ctx context.Context, dir string, n int, sink Sink) (*Capture, error) {
	c := &Capture{dir: dir, sink: sink, parent: ctx}
	ctx, c.cancel = context.WithCancel(ctx)
	for i := 1; i <= n; i++ {
		ff, err := makeFifo(dir, fmt.Sprintf("pages-%d.img", i))
		if err != nil {
			c.Abort()
			return nil, err
		}
		c.fifos = append(c.fifos, ff)
	}
	for _, ff := range c.fifos {
		c.wg.Add(1)
		go c.read(ctx, ff)
	}
	go func() {
		<-ctx.Done() // parent's end, or our cancel in Finish and Abort
		if c.parent.Err() != nil {
			c.Abort()
		}
	}()
	return c, nil
}

// makeFifo creates dir/name as a FIFO and opens it for reading without
// blocking (there is no writer yet).
func makeFifo(dir, name string) (*fifo, error) {
	path := filepath.Join(dir, name)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("capture %s: mkfifo: %w", name, err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("capture %s: %w", name, err)
	}
	// Not f.Fd(): it would put the descriptor in blocking mode.
	withFd(f, func(fd int) { _, _ = unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, fifoSize) })
	return &fifo{name: name, path: path, f: f}, nil
}

// read waits for CRIU to open ff, then stores its stream. A Store error
// aborts the whole capture, so that CRIU's writes fail instead of
// blocking on a FIFO nobody reads.
func (c *Capture) read(ctx context.Context, ff *fifo) {
	defer c.wg.Done()
	defer ff.f.Close()
	if !waitWriter(ff.f) {
		return // closed by Finish or Abort: CRIU never opened it
	}
	c.mu.Lock()
	ff.opened = true
	c.mu.Unlock()
	err := c.sink.Store(ctx, ff.name, &fifoReader{f: ff.f})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// After an abort, or once the context has ended, a failed Store
		// is the abort's consequence, not its cause.
		if c.err == nil && !c.aborted && ctx.Err() == nil {
			c.err = err
		}
		go c.Abort()
		return
	}
	c.captured = append(c.captured, ff.name)
}

// waitWriter blocks until a writer has opened f's FIFO (data is there, or
// it has come and gone: POLLHUP is only reported after a writer was seen),
// and reports false if f was closed first.
func waitWriter(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	err = rc.Read(func(fd uintptr) bool { return writerSeen(int(fd)) })
	return err == nil
}

// writerSeen polls fd once for data or a hang-up.
func writerSeen(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
}

// fifoReader reads a FIFO whose writer has connected: a read of 0 bytes is
// the end of the stream.
type fifoReader struct{ f *os.File }

func (r *fifoReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), p)
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err // closed by Abort
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Finish ends a capture once CRIU has exited: FIFOs CRIU never opened are
// closed and removed, the others read to their end and stored. It returns
// the names of the files stored, or the first Store error, or (after an
// abort) an error wrapping ErrAborted.
func (c *Capture) Finish() ([]string, error) {
	for _, ff := range c.fifos {
		// A FIFO CRIU opened reports POLLHUP from the moment CRIU closed
		// it, for good; CRIU has exited, so one without is one it never
		// opened (or one already read and closed by its reader).
		seen := true
		withFd(ff.f, func(fd int) { seen = writerSeen(fd) })
		c.mu.Lock()
		opened := ff.opened
		c.mu.Unlock()
		if !seen && !opened {
			ff.f.Close() // ends its waitWriter
		}
	}
	c.wg.Wait()
	c.mu.Lock()
	c.finished = true // from now on the context watcher's Abort is a no-op
	c.mu.Unlock()
	c.cancel()
	c.removeFifos()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return c.captured, c.err
	case c.aborted && c.cause != nil:
		return nil, fmt.Errorf("%w: %w", ErrAborted, c.cause)
	case c.aborted:
		return nil, ErrAborted
	}
	return c.captured, nil
}

// Abort cancels the sink's Stores and closes every FIFO: CRIU's next
// write to one fails (EPIPE) and the dump fails. It waits for the readers
// and removes the FIFOs; the sink removes its partial files. Safe to call
// more than once, and a no-op after Finish.
func (c *Capture) Abort() {
	c.mu.Lock()
	if c.aborted || c.finished {
		c.mu.Unlock()
		return
	}
	c.aborted = true
	if c.parent.Err() != nil {
		c.cause = context.Cause(c.parent) // for Finish's error
	}
	c.mu.Unlock()
	// The sinks' context first: a Store blocked on its destination (a
	// stalled network) returns, and the readers can be waited for.
	c.cancel()
	for _, ff := range c.fifos {
		ff.f.Close()
	}
	c.wg.Wait()
	c.removeFifos()
}

// removeFifos removes the FIFOs still in the directory (a stored file
// replaced its FIFO already).
func (c *Capture) removeFifos() {
	for _, ff := range c.fifos {
		var st unix.Stat_t
		if unix.Lstat(ff.path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			os.Remove(ff.path)
		}
	}
}

// withFd runs fn with f's descriptor without changing its mode (os.File.Fd
// would make it blocking); nothing runs if f is closed.
func withFd(f *os.File, fn func(fd int)) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { fn(int(fd)) })
	}
}
