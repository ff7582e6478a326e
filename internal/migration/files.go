package migration

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vesselhost/vessel/internal/sparse"
)

// SendDir writes the regular files of dir (one level: checkpoint images)
// to w as a tar stream and returns the payload bytes.
func SendDir(w io.Writer, dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	// One buffer for the whole stream: a checkpoint is ~100 small files,
	// and each tar header or file written straight to the session would
	// be a frame, a TLS record and a syscall of its own (in the frozen
	// window of a live move).
	bw := bufio.NewWriterSize(w, sendDirBuffer)
	tw := tar.NewWriter(bw)
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return total, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o600, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
			return total, err
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return total, err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		total += n
		if err != nil {
			return total, err
		}
	}
	if err := tw.Close(); err != nil {
		return total, err
	}
	return total, bw.Flush()
}

// sendDirBuffer is SendDir's write buffer.
const sendDirBuffer = 256 << 10

// ReceiveDir reads a stream made by SendDir into dir (created if needed)
// and returns the payload bytes. Only plain file names are accepted.
func ReceiveDir(r io.Reader, dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	tr := tar.NewReader(r)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("receive images: %w", err)
		}
		name := hdr.Name
		if hdr.Typeflag != tar.TypeReg || name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return total, fmt.Errorf("%w: unexpected entry %q in the image stream", ErrProtocol, name)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, fs.FileMode(0o600))
		if err != nil {
			return total, err
		}
		// Holes where the data is zero (a VM's memory state file).
		n, err := sparse.Copy(f, tr)
		total += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return total, err
		}
	}
}

// CountingWriter counts bytes passing through to W.
type CountingWriter struct {
	W io.Writer
	N int64
}

func (c *CountingWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

// CountingReader counts bytes read from R.
type CountingReader struct {
	R io.Reader
	N int64
}

func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}
