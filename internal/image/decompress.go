package image

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Magic numbers of the compression formats imports may use.
var (
	gzipMagic  = []byte{0x1f, 0x8b}
	xzMagic    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	zstdMagic  = []byte{0x28, 0xb5, 0x2f, 0xfd}
	bzip2Magic = []byte("BZh")
)

// decompress returns the uncompressed stream of r, sniffing its first bytes
// for gzip, xz, zstd or bzip2; anything else is passed through as is. Close
// the result when done.
func decompress(ctx context.Context, r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(len(xzMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read image: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrInvalidImage, err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, xzMagic):
		return newXZReader(ctx, br)
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", ErrInvalidImage, err)
		}
		return zr.IOReadCloser(), nil
	case bytes.HasPrefix(magic, bzip2Magic) && len(magic) > 3 && magic[3] >= '1' && magic[3] <= '9':
		return io.NopCloser(bzip2.NewReader(br)), nil
	}
	return io.NopCloser(br), nil
}
