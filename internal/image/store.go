package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// tmpPrefix starts the names of the store's temporary files and directories.
const tmpPrefix = ".tmp-"

// Store is a directory of images, one <fingerprint>.tar file each. Its
// methods are safe for concurrent use, also by several processes: files
// appear atomically and importing the same image twice keeps the first file.
type Store struct {
	dir     string
	maxSize int64
}

// DefaultMaxSize is the largest image a store accepts unless told
// otherwise: the uncompressed tar stream of an import, of an OCI image's
// flattened layers, or of a build.
const DefaultMaxSize = 8 << 30

// NewStore returns the store in dir, creating the directory (mode 0700) and
// its parents if needed. It accepts images up to maxSize bytes once
// decompressed (0: DefaultMaxSize); a larger one fails with ErrTooLarge,
// and nothing of it is kept.
func NewStore(dir string, maxSize int64) (*Store, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	return &Store{dir: abs, maxSize: maxSize}, nil
}

// Path returns the file that holds (or would hold) the image with the given
// fingerprint: DIR/<fingerprint>.tar. It returns "" if fingerprint is not 64
// lowercase hex digits, so no caller can name a file outside the store.
func (s *Store) Path(fingerprint string) string {
	if !validFingerprint(fingerprint) {
		return ""
	}
	return filepath.Join(s.dir, fingerprint+".tar")
}

// Has reports whether the image with the given fingerprint is stored.
func (s *Store) Has(fingerprint string) bool {
	p := s.Path(fingerprint)
	if p == "" {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Open opens the stored tar archive of the image with the given fingerprint,
// e.g. to export it. A missing image is an error wrapping ErrNotFound.
func (s *Store) Open(fingerprint string) (*os.File, error) {
	p := s.Path(fingerprint)
	if p == "" {
		return nil, fmt.Errorf("open image %q: %w", fingerprint, ErrNotFound)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open image %s: %w", fingerprint, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open image: %w", err)
	}
	return f, nil
}

// Delete removes the image with the given fingerprint. Deleting an image that
// is not stored (or an invalid fingerprint, which never is) succeeds.
func (s *Store) Delete(fingerprint string) error {
	p := s.Path(fingerprint)
	if p == "" {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete image %s: %w", fingerprint, err)
	}
	return nil
}

// validFingerprint reports whether fp is 64 lowercase hex digits.
func validFingerprint(fp string) bool {
	if len(fp) != 64 {
		return false
	}
	for i := 0; i < len(fp); i++ {
		c := fp[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
