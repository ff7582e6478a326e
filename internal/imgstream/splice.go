package imgstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultSpliceDepth is how many writes are in flight when DirSink splices
// a pipe to a direct file (see spliceBlocks): a block in flight costs a
// pipe, not a buffer. 1 GiB through a pipe into a NODATASUM directory of a
// btrfs loop pool (/work/snapio-res/splice, 3 rounds): 8 at once 2046-2125
// MB/s, 4 at once 1493-1909, fio's 1 MiB O_DIRECT qd8 write 1942-2863.
const DefaultSpliceDepth = 8

// pipeSource is a stream whose bytes come out of a pipe (a FIFO's read
// end, in non-blocking mode): DirSink moves them to a direct file with
// splice(2) instead of reading them into its buffers.
type pipeSource interface {
	pipeConn() (syscall.RawConn, error)
}

func (r *fifoReader) pipeConn() (syscall.RawConn, error) { return r.f.SyscallConn() }

// blockPipe is one writer's pipe: it holds one block of the stream on its
// way from the source pipe to the file.
type blockPipe struct {
	r, w int
	bs   int    // the largest block it holds (a multiple of alignment)
	buf  []byte // aligned, bs bytes, for the fallback (allocated on first use)
}

func newBlockPipe(bs int) (*blockPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	p := &blockPipe{r: fds[0], w: fds[1], bs: bs}
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, bs); err != nil || n < bs {
		p.close()
		return nil, fmt.Errorf("pipe of %d bytes: %d, %w", bs, n, err)
	}
	return p, nil
}

func (p *blockPipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
	if p.buf != nil {
		unix.Munmap(p.buf) //nolint:errcheck // nothing to do about it
	}
}

// fill moves up to bs bytes of src into p (empty), waiting for them. It
// returns how many; eof once src's writer has closed it and it is
// drained; full if p ran out of room first: splice moves the source's
// pipe buffers as they are, one slot of p each, and a writer of pieces
// that are not whole pages leaves buffers of less than a page.
func (p *blockPipe) fill(src syscall.RawConn, bs int) (n int, eof, full bool, err error) {
	for n < bs {
		var m int64
		var serr error
		err = src.Read(func(fd uintptr) bool {
			// Non-blocking for both: the poller waits for the source.
			m, serr = unix.Splice(int(fd), nil, p.w, nil, bs-n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if serr == unix.EAGAIN && n > 0 {
				// Nothing to move, or no room in p: only the
				// source's content tells.
				if q, qerr := unix.IoctlGetInt(int(fd), unix.TIOCINQ); qerr == nil && q > 0 {
					full = true
					return true
				}
			}
			return serr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return n, false, false, err // closed by Abort
		case full:
			return n, false, true, nil
		case serr != nil:
			return n, false, false, serr
		case m == 0:
			return n, true, false, nil
		}
		n += int(m)
	}
	return n, false, false, nil
}

// readAll reads p's n bytes out.
func (p *blockPipe) readAll(n int) ([]byte, error) {
	b := make([]byte, n)
	for got := 0; got < n; {
		m, err := unix.Read(p.r, b[got:])
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return nil, fmt.Errorf("pipe: %d of %d bytes", got, n)
		}
		got += m
	}
	return b, nil
}

// writeTo writes p's n bytes to fd at off: spliced (the pipe's pages go to
// the device as they are) while the length is aligned, and read out into
// an aligned buffer, padded, and written for an unaligned tail or where
// the filesystem refuses the pipe's pages for direct I/O (EINVAL: a pipe
// buffer that is not a whole page, from a writer's unaligned writes;
// btrfs takes those buffered itself).
func (p *blockPipe) writeTo(fd int, off int64, n int) error {
	for n > 0 && n%alignment == 0 {
		m, err := unix.Splice(p.r, nil, fd, &off, n, unix.SPLICE_F_MOVE)
		if errors.Is(err, unix.EINVAL) {
			break
		}
		if err != nil {
			return err
		}
		if m == 0 {
			return fmt.Errorf("splice: no progress with %d bytes left", n)
		}
		n -= int(m) // splice advanced off
	}
	if n == 0 {
		return nil
	}
	if p.buf == nil {
		b, err := alignedAlloc(p.bs)
		if err != nil {
			return err
		}
		p.buf = b
	}
	if n > len(p.buf) {
		return fmt.Errorf("block of %d bytes for a buffer of %d", n, len(p.buf))
	}
	for got := 0; got < n; {
		m, err := unix.Read(p.r, p.buf[got:n])
		if err != nil {
			return err
		}
		if m == 0 {
			return fmt.Errorf("pipe: %d of %d bytes", got, n)
		}
		got += m
	}
	w := (n + alignment - 1) / alignment * alignment
	clear(p.buf[n:w])
	return pwriteFd(fd, p.buf[:w], off)
}

// pwriteFd writes all of b to fd at off.
func pwriteFd(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// spliceBlock is one block of the stream, in p, and where it goes.
type spliceBlock struct {
	p   *blockPipe
	off int64
	n   int
}

// spliceBlocks is copyBlocks for a direct file fed by a pipe: the stream
// goes in blocks of bs from the source pipe into one pipe per writer
// (splice moves the page references, no copy) and from there into the
// file at the block's offset (splice into an O_DIRECT file: the device
// reads the pages themselves), depth blocks in flight. The file's size is
// kept ahead as copyBlocks does. CRIU's background write feeds the source
// from its own copy of the pages; vessel's read of them into its buffers,
// one of the three copies of every byte on the way, is gone. It returns
// the number of bytes moved, or errNoSplice if it could not start.
func (s *DirSink) spliceBlocks(ctx context.Context, f *os.File, r io.Reader, src syscall.RawConn, bs, depth int) (int64, error) {
	free := make(chan *blockPipe, depth)
	var pipes []*blockPipe
	defer func() {
		for _, p := range pipes {
			p.close()
		}
	}()
	for range depth {
		p, err := newBlockPipe(bs)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errNoSplice, err)
		}
		pipes = append(pipes, p)
		free <- p
	}
	fd := int(f.Fd()) // a regular file: not in the poller, nothing changes
	todo := make(chan spliceBlock, depth)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var wg sync.WaitGroup
	for range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range todo {
				if ctx.Err() == nil {
					if err := b.p.writeTo(fd, b.off, b.n); err != nil {
						cancel(err)
					} else {
						s.written.Add(int64(b.n))
					}
				}
				free <- b.p // after an error it is not taken again
			}
		}()
	}

	var off, size int64 // size: the file's, kept ahead of off
	var rerr error
	var rest *blockPipe // holds the next n bytes, not a whole number of pages
	var restN int
	for ctx.Err() == nil {
		var p *blockPipe
		select {
		case p = <-free:
		case <-ctx.Done():
		}
		if p == nil {
			break
		}
		n, eof, full, err := p.fill(src, bs)
		if full && n%alignment != 0 {
			// Every block but the last must be whole pages (direct
			// I/O's offsets): the rest of this stream is copied.
			rest, restN = p, n
			break
		}
		if n > 0 {
			if end := off + int64(n); end > size {
				size = off + int64(growBlocks*bs)
				if err := f.Truncate(size); err != nil {
					rerr = fmt.Errorf("grow: %w", err)
					break
				}
			}
			todo <- spliceBlock{p: p, off: off, n: n}
			off += int64(n)
		} else {
			free <- p
		}
		if err != nil {
			rerr = fmt.Errorf("read: %w", err)
			break
		}
		if eof {
			break
		}
	}
	close(todo)
	wg.Wait()
	if rerr != nil {
		return off, rerr
	}
	if err := context.Cause(ctx); err != nil {
		return off, err
	}
	if rest != nil {
		head, err := rest.readAll(restN)
		if err != nil {
			return off, fmt.Errorf("read: %w", err)
		}
		return s.copyBlocks(ctx, f, io.MultiReader(bytes.NewReader(head), r), bs, DefaultDepth, true, off, size)
	}
	return off, nil
}

// errNoSplice says spliceBlocks could not set up its pipes (nothing was
// read): the caller copies instead.
var errNoSplice = errors.New("no pipes to splice through")
