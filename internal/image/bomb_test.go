package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// bombLimit is the store limit of the decompression-bomb tests; the bombs
// expand to 16x it.
const bombLimit = 1 << 20

// bombTar is a valid system image whose one big file of zeros makes the tar
// stream 16x bombLimit: it compresses to a few KiB.
func bombTar(t *testing.T) []byte {
	return makeTar(t,
		tarMember{name: "sbin/", typ: tar.TypeDir},
		tarMember{name: "sbin/init", data: "#!/bin/sh\n", mode: 0o755},
		tarMember{name: "zeros", data: strings.Repeat("\x00", 16*bombLimit)},
	)
}

func newLimitedStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(filepath.Join(t.TempDir(), "images"), bombLimit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertEmptyStore checks a failed import kept nothing: no image, no
// temporary file or directory.
func assertEmptyStore(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the store after a refused import: %s", e.Name())
	}
}

// TestImportDecompressionBomb: an import that expands beyond the store's
// limit fails with ErrTooLarge, whatever the compression, and leaves
// nothing in the store.
func TestImportDecompressionBomb(t *testing.T) {
	bomb := bombTar(t)
	for name, data := range map[string][]byte{
		"plain": bomb,
		"gzip":  gzipped(t, bomb),
		"zstd":  zstded(t, bomb),
		"xz":    xzed(t, bomb),
	} {
		t.Run(name, func(t *testing.T) {
			s := newLimitedStore(t)
			_, err := s.Import(context.Background(), bytes.NewReader(data))
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--image-max-size") {
				t.Fatalf("import of a %d-byte bomb: %v, want ErrTooLarge naming the limit", len(data), err)
			}
			if errors.Is(err, ErrInvalidImage) {
				t.Errorf("a too large image is reported as invalid: %v", err)
			}
			assertEmptyStore(t, s)
		})
	}
	t.Run("under the limit", func(t *testing.T) {
		s := newLimitedStore(t)
		if _, err := s.Import(context.Background(), bytes.NewReader(gzipped(t, minimalRootfs(t, "")))); err != nil {
			t.Fatalf("a small image: %v", err)
		}
	})
}

// TestImportOCILayerBomb: a packed OCI layout that is small, whose layer
// expands beyond the limit, fails the same way.
func TestImportOCILayerBomb(t *testing.T) {
	img := ociImage(t, runtime.GOARCH, v1.Config{}, layerFromBytes(t, bombTar(t)))
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	packed := gzipped(t, packDir(t, dir))
	if len(packed) >= bombLimit {
		t.Fatalf("the packed layout is %d bytes: not a bomb", len(packed))
	}
	s := newLimitedStore(t)
	if _, err := s.Import(context.Background(), bytes.NewReader(packed)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("import: %v, want ErrTooLarge", err)
	}
	assertEmptyStore(t, s)
}
