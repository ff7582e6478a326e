// Package sparse writes received files with holes where their data is
// zero: a VM's raw disk or memory state file sent whole (a tar stream
// carries holes as zeros) takes on the receiving pool only what the
// guest wrote.
package sparse

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
)

// Block is the unit Copy leaves out when it is all zeros: a filesystem
// block, so the holes are real.
const Block = 4096

// bufSize is how much Copy reads at once.
const bufSize = 1 << 20

// bufs keeps Copy's buffers: a migration receives a checkpoint's dozens
// of small image files one after the other, inside the frozen window, and
// a fresh megabyte for each (allocated, then collected) made that 4-6
// times slower (an idle move's image transfer 5 -> 20-30 ms).
var bufs = sync.Pool{New: func() any { return new([bufSize]byte) }}

var zeros [Block]byte

// Copy writes what r yields into f, a new (empty) file, from offset 0:
// runs of data blocks are written, all-zero blocks (Block bytes, aligned
// in the stream) are skipped and stay holes, and the file's size is set to
// the end. It returns the bytes read from r.
func Copy(f *os.File, r io.Reader) (int64, error) {
	b := bufs.Get().(*[bufSize]byte)
	defer bufs.Put(b)
	buf := b[:]
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if werr := writeData(f, buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return off, err
		}
	}
	// The size, when the file ends in a hole.
	return off, f.Truncate(off)
}

// writeData writes the data blocks of b, which is at off in the file,
// one write per run of them.
func writeData(f *os.File, b []byte, off int64) error {
	start := -1 // the first block of the current run of data
	for i := 0; i < len(b); i += Block {
		end := min(i+Block, len(b))
		zero := bytes.Equal(b[i:end], zeros[:end-i])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if _, err := f.WriteAt(b[start:i], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		_, err := f.WriteAt(b[start:], off+int64(start))
		return err
	}
	return nil
}
