package shim

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// rotatingLog is the container's console log: an append-only file that is
// renamed to <path>.1 (replacing an older one) once it has grown past max
// bytes. Both the stdout and the stderr copier write to it.
type rotatingLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

func openLog(path string, max int64) (*rotatingLog, error) {
	if max <= 0 {
		max = DefaultLogMax
	}
	l := &rotatingLog{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open console log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open console log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends p, then rotates if the file has passed its limit.
func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	if err != nil || l.size < l.max {
		return n, err
	}
	l.f.Close()
	l.f = nil
	renameErr := os.Rename(l.path, l.path+".1")
	if err := l.open(); err != nil {
		return n, err
	}
	if renameErr != nil {
		return n, fmt.Errorf("rotate console log: %w", renameErr)
	}
	return n, nil
}

// Close closes the current file.
func (l *rotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// copyInto copies r into w until r reaches EOF or fails. A failing write
// does not stop it: the pipe must keep being read, or the container would
// block on a full pipe.
func copyInto(w io.Writer, r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n]) //nolint:errcheck // see above
		}
		if err != nil {
			return
		}
	}
}
