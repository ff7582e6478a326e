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
