package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"time"
)

// staged is a tar stream written to a temporary file in the store and
// scanned, not yet linked under its fingerprint. Every way of adding an
// image goes through Store.stage, then Store.commit or discard.
type staged struct {
	tmp         string
	fingerprint string
	size        int64
	tree        *tarTree
}

// stage reads one uncompressed tar stream from r to its end, writing it to
// a temporary file in the store while hashing it and scanning its members
// (see scanTar). Input that is not a valid tar stream, or that breaks off,
// is an error wrapping ErrInvalidImage; a stream longer than the store's
// MaxSize stops there with ErrTooLarge (the decompressor feeding r is not
// read further, and the partial file is removed); a cancelled ctx returns
// ctx.Err().
func (s *Store) stage(ctx context.Context, r io.Reader) (st *staged, err error) {
	f, err := os.CreateTemp(s.dir, tmpPrefix+"*.tar")
	if err != nil {
		return nil, fmt.Errorf("stage image: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()

	h := sha256.New()
	bw := bufio.NewWriterSize(f, 1<<20)
	out := &countingWriter{w: io.MultiWriter(bw, h)}
	limited := &sizeLimitReader{r: ctxReader{ctx: ctx, r: r}, left: s.maxSize}
	tee := io.TeeReader(limited, out)
	tree, err := scanTar(tee)
	if err == nil {
		// Keep what follows the end-of-archive marker (GNU tar pads to
		// 10 KiB records) so the file is the stream exactly as given.
		_, err = io.Copy(io.Discard, tee)
	}
	if err != nil {
		if limited.exceeded {
			return nil, fmt.Errorf("%w: larger than %d MiB once decompressed (the limit is vesseld's --image-max-size)", ErrTooLarge, s.maxSize>>20)
		}
		return nil, classifyStageError(ctx, out, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("stage image: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("stage image: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("stage image: %w", err)
	}
	return &staged{
		tmp:         f.Name(),
		fingerprint: hex.EncodeToString(h.Sum(nil)),
		size:        out.n,
		tree:        tree,
	}, nil
}

// classifyStageError tells apart why reading a tar stream failed: the
// context ended, the store could not be written, or (anything else) the
// input was bad.
func classifyStageError(ctx context.Context, out *countingWriter, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if out.err != nil {
		return fmt.Errorf("stage image: %w", out.err)
	}
	if errors.Is(err, ErrInvalidImage) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalidImage, err)
}

// commit links a staged file into the store under its fingerprint. If the
// image is stored already, the stored file is kept. The staged file is gone
// afterwards either way.
func (s *Store) commit(st *staged) error {
	defer st.discard()
	err := os.Link(st.tmp, s.Path(st.fingerprint))
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("store image %s: %w", st.fingerprint, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("store image %s: %w", st.fingerprint, err)
	}
	return nil
}

// discard removes the staged file; it may be called more than once.
func (st *staged) discard() {
	os.Remove(st.tmp)
}

// systemMetadata returns the metadata of a system image, one that boots
// /sbin/init. Without an /sbin/init it fails with ErrInvalidImage.
func (st *staged) systemMetadata(source string) (Metadata, error) {
	kind := st.tree.detectInit()
	if kind == initNone {
		return Metadata{}, fmt.Errorf("%w: no /sbin/init: import an OCI image for app containers", ErrInvalidImage)
	}
	md := st.baseMetadata(source)
	md.Init = []string{"/sbin/init"}
	md.Env = []string{defaultPath}
	md.StopSignal = kind.stopSignal()
	return md, nil
}

// baseMetadata fills the fields every image has the same way.
func (st *staged) baseMetadata(source string) Metadata {
	return Metadata{
		Version:      MetadataVersion,
		Fingerprint:  st.fingerprint,
		Size:         st.size,
		Created:      time.Now().UTC(),
		Source:       source,
		OS:           st.tree.osRelease(),
		Cwd:          "/",
		Architecture: runtime.GOARCH,
	}
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// countingWriter counts the bytes written through it and remembers the first
// write error, so a full disk is not mistaken for bad input.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// ctxReader fails reads once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// sizeLimitReader reads at most left bytes of r; reading past them fails
// with ErrTooLarge and sets exceeded.
type sizeLimitReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *sizeLimitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a stream of exactly the limit from a
		// longer one.
		var b [1]byte
		if n, err := l.r.Read(b[:]); n == 0 {
			return 0, err
		}
		l.exceeded = true
		return 0, ErrTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
