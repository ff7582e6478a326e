package imgstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DirSource serves image files from a directory, each read sequentially
// through a read-ahead reader: one read of ReadAhead bytes is in flight
// while the caller consumes the previous one, and the next is issued as
// soon as it completes. (On spinning disks and SSDs alike a single large
// sequential request stream beats a queue of parallel ones for loading;
// see the seed text on snapshot I/O.)
type DirSource struct {
	// Dir holds the image files.
	Dir string
	// ReadAhead is the size of one read (DefaultReadAhead when zero).
	ReadAhead int

	read atomic.Int64
}

// Read returns how many bytes the source has read so far (progress).
func (s *DirSource) Read() int64 { return s.read.Load() }

// Open implements Source.
func (s *DirSource) Open(ctx context.Context, name string) (io.ReadCloser, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, fmt.Errorf("open %q: %w", name, err)
	}
	f, err := os.Open(filepath.Join(s.Dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// A hint for the kernel's own read-ahead under ours (it doubles the
	// window for the device's requests).
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	size := s.ReadAhead
	if size <= 0 {
		size = DefaultReadAhead
	}
	return newReadAhead(ctx, f, size, &s.read), true, nil
}

// readAhead reads a file in chunks in a goroutine, one chunk ahead of its
// consumer: two buffers, one being read into while the other is consumed.
type readAhead struct {
	f      *os.File
	cancel context.CancelFunc
	chunks chan chunk // filled chunks, in order
	free   chan []byte
	cur    chunk
	pos    int
	err    error
}

type chunk struct {
	buf []byte
	err error
}

func newReadAhead(ctx context.Context, f *os.File, size int, counter *atomic.Int64) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{f: f, cancel: cancel, chunks: make(chan chunk, 1), free: make(chan []byte, 2)}
	ra.free <- make([]byte, size)
	ra.free <- make([]byte, size)
	go ra.fill(ctx, counter)
	return ra
}

// fill reads chunk after chunk until EOF, an error or cancellation.
func (ra *readAhead) fill(ctx context.Context, counter *atomic.Int64) {
	defer close(ra.chunks)
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-ctx.Done():
			return
		}
		n, err := io.ReadFull(ra.f, buf)
		counter.Add(int64(n))
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		select {
		case ra.chunks <- chunk{buf: buf[:n], err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Read implements io.Reader.
func (ra *readAhead) Read(p []byte) (int, error) {
	for ra.pos == len(ra.cur.buf) {
		if ra.err != nil {
			return 0, ra.err
		}
		if ra.cur.buf != nil {
			ra.free <- ra.cur.buf[:cap(ra.cur.buf)]
			ra.cur.buf = nil
		}
		c, ok := <-ra.chunks
		if !ok {
			return 0, io.ErrClosedPipe
		}
		ra.cur, ra.pos, ra.err = c, 0, c.err
	}
	n := copy(p, ra.cur.buf[ra.pos:])
	ra.pos += n
	return n, nil
}

// Close stops the read-ahead and closes the file.
func (ra *readAhead) Close() error {
	ra.cancel()
	for range ra.chunks { // let fill end before the file goes
	}
	return ra.f.Close()
}

// Prefetch loads every page file of dir into the page cache, from start
// to end, so that CRIU finds its pages there on restore: CRIU reads the
// pages itself (vessel cannot replace those reads when runc drives CRIU),
// but vessel can run ahead of them with one long sequential request
// stream, starting while CRIU still sets the container up. Each file is
// read in windows of DefaultReadAhead: the next window's reads are issued
// (POSIX_FADV_WILLNEED, no copy through user space) as soon as the
// previous window has arrived, so one window is always in flight. It
// returns the bytes loaded.
func Prefetch(ctx context.Context, dir string) (int64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, p := range names {
		n, err := prefetchFile(ctx, p, DefaultReadAhead)
		total += n
		if err != nil {
			return total, fmt.Errorf("prefetch %s: %w", p, err)
		}
	}
	return total, nil
}

// prefetchFile loads one file into the page cache, window by window.
func prefetchFile(ctx context.Context, path string, window int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	fd, size := int(f.Fd()), fi.Size()
	var one [1]byte
	for off := int64(0); off < size; off += window {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		if off == 0 {
			_ = unix.Fadvise(fd, 0, window, unix.FADV_WILLNEED)
		}
		// Queue the next window, then wait for this one: reading its last
		// byte blocks until that page (the last of the window's requests)
		// has arrived.
		if next := off + window; next < size {
			_ = unix.Fadvise(fd, next, window, unix.FADV_WILLNEED)
		}
		end := min(off+window, size)
		if _, err := f.ReadAt(one[:], end-1); err != nil {
			return off, err
		}
	}
	return size, nil
}

// WriteTo implements io.WriterTo: whole chunks go to w without a copy.
func (ra *readAhead) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if ra.pos < len(ra.cur.buf) {
			n, err := w.Write(ra.cur.buf[ra.pos:])
			total += int64(n)
			ra.pos += n
			if err != nil {
				return total, err
			}
		}
		if _, err := ra.Read(nil); err != nil {
			if err == io.EOF {
				return total, nil
			}
			return total, err
		}
	}
}
