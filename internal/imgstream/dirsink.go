package imgstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Defaults of DirSink.
const (
	// DefaultBlockSize is the size of one write: large enough that the
	// device sees long sequential requests, small enough to keep several
	// in flight.
	DefaultBlockSize = 1 << 20
	// DefaultDepth is how many writes are in flight at once.
	DefaultDepth = 4
	// growBlocks is how far ahead of its writes, in blocks, a direct
	// file's size is set (see DirSink).
	growBlocks = 64
	// alignment is what O_DIRECT needs of buffers, offsets and lengths
	// on every filesystem vessel uses (the logical block size is at most
	// the page size).
	alignment = 4096
)

// DirSink stores image files in a directory. Each file is written with
// O_DIRECT (no page cache: the data goes to the device once, and a large
// dump does not push other containers' cache out) in aligned blocks of
// BlockSize, Depth of them in flight, into a temporary name; it is then
// synced and renamed into place. The last, partial block is written padded
// and the file truncated to its real size. A filesystem that refuses
// O_DIRECT gets buffered writes (then synced) instead.
//
// A direct file's size is kept ahead of the writes (ftruncate, growBlocks
// blocks at a time; the holes cost no space, and the final Truncate sets
// the real size): a direct write that ends past the end of the file
// extends it, and btrfs (btrfs_direct_write, as ext4 and XFS) serves
// such a write under the inode's exclusive lock, held until the write
// has completed, so writes appending to a file run one at a time
// whatever the depth. Within the size they take the lock shared and
// Depth of them reach the device at once. 1 GiB through a pipe into a
// NODATASUM directory of a btrfs loop pool: ~1.0 GB/s appending, ~1.9
// growing ahead, fio's 1 MiB O_DIRECT qd8 write of a fallocated file
// ~1.8, same rounds (preallocating with FALLOC_FL_KEEP_SIZE, which
// leaves the size alone: ~1.05).
//
// Store returns once the file's data is durable; the directory entries of a
// batch of files are made durable by one SyncDir at the end (a directory
// fsync per file would cost a filesystem log commit each).
type DirSink struct {
	// Dir is the directory the files go to (it must exist).
	Dir string
	// BlockSize (a multiple of 4096) and Depth: DefaultBlockSize and
	// DefaultDepth when zero.
	BlockSize int
	Depth     int
	// Volatile is for files read once, right away, and worthless after a
	// crash (a migration's checkpoint images, restored as soon as they are
	// in): buffered writes, so that the reader finds them in the page
	// cache, and no syncs.
	Volatile bool

	written atomic.Int64
}

// Written returns how many bytes the sink has written so far (progress).
func (s *DirSink) Written() int64 { return s.written.Load() }

// Store implements Sink.
func (s *DirSink) Store(ctx context.Context, name string, r io.Reader) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("store %q: %w", name, err)
	}
	bs, depth := s.BlockSize, s.Depth
	if bs <= 0 {
		bs = DefaultBlockSize
	}
	if depth <= 0 {
		depth = DefaultDepth
	}
	if bs%alignment != 0 {
		return fmt.Errorf("store %s: block size %d is not a multiple of %d", name, bs, alignment)
	}
	final := filepath.Join(s.Dir, name)
	tmp := filepath.Join(s.Dir, "."+name+".part")
	f, direct, err := openDirect(tmp, !s.Volatile)
	if err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	size, err := s.copyBlocks(ctx, f, r, bs, depth, direct)
	if err == nil {
		err = f.Truncate(size) // drops the padding of the last block
	}
	if err == nil && !s.Volatile {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store %s: %w", name, err)
	}
	return nil
}

// openDirect creates path for writing with O_DIRECT if direct is set and
// the filesystem takes it (tmpfs does not); the bool says which it got.
func openDirect(path string, direct bool) (*os.File, bool, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC | unix.O_CLOEXEC
	if !direct {
		f, err := os.OpenFile(path, flags, 0o600)
		return f, false, err
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) {
		f, err = os.OpenFile(path, flags, 0o600)
		return f, false, err
	}
	return f, true, err
}

// block is one aligned buffer and where it goes in the file.
type block struct {
	buf []byte // aligned, len = bytes to write (padded to alignment)
	off int64
}

// copyBlocks reads r in blocks of bs and writes them at increasing offsets
// with depth writers, returning the number of bytes read. Buffers are
// recycled through a free list: at most depth+1 exist, so memory is
// bounded whatever the file's size.
func (s *DirSink) copyBlocks(ctx context.Context, f *os.File, r io.Reader, bs, depth int, direct bool) (int64, error) {
	arena, err := alignedAlloc(bs * (depth + 1))
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(arena) //nolint:errcheck // nothing to do about it
	free := make(chan []byte, depth+1)
	for i := 0; i <= depth; i++ {
		free <- arena[i*bs : (i+1)*bs : (i+1)*bs]
	}
	todo := make(chan block, depth)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var wg sync.WaitGroup
	for range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range todo {
				if ctx.Err() == nil {
					if err := pwriteFull(f, b.buf, b.off); err != nil {
						cancel(err)
					} else {
						s.written.Add(int64(len(b.buf)))
					}
				}
				free <- b.buf[:cap(b.buf)]
			}
		}()
	}

	var off, size int64 // size: the file's, kept ahead of off by grow
	var rerr error
	for ctx.Err() == nil {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if buf == nil {
			break
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			w := n
			if direct && w%alignment != 0 {
				// The tail: pad to the alignment; Truncate cuts it off.
				w = (n + alignment - 1) / alignment * alignment
				clear(buf[n:w])
			}
			if direct && off+int64(w) > size {
				size = off + int64(growBlocks*bs)
				if err := f.Truncate(size); err != nil {
					rerr = fmt.Errorf("grow: %w", err)
					free <- buf
					break
				}
			}
			todo <- block{buf: buf[:w], off: off}
			off += int64(n)
		} else {
			free <- buf
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = fmt.Errorf("read: %w", err)
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
	return off, nil
}

// pwriteFull writes all of b at off.
func pwriteFull(f *os.File, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := f.WriteAt(b, off)
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// alignedAlloc returns n bytes of page-aligned anonymous memory.
func alignedAlloc(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocate %d aligned bytes: %w", n, err)
	}
	return b, nil
}

// SyncDir makes the names of the files stored so far durable (nothing to
// do for a Volatile sink).
func (s *DirSink) SyncDir() error {
	if s.Volatile {
		return nil
	}
	return syncDir(s.Dir)
}

// syncDir makes a directory's entries (a rename) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
