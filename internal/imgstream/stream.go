package imgstream

import (
	"context"
	"errors"
	"io"
	"strings"
)

// Sink receives image files.
type Sink interface {
	// Store consumes r to its end as the content of the image file name
	// (a base name such as "pages-1.img") and returns once the file's
	// content is durably stored (a sink may leave making a batch of names
	// durable to a final step of its own, as DirSink.SyncDir). On error
	// (or when ctx ends) nothing of name may be left visible. Store may
	// be called for several files at once.
	Store(ctx context.Context, name string, r io.Reader) error
}

// Errors.
var (
	// ErrBadName says an image file name is not a plain base name.
	ErrBadName = errors.New("invalid image file name")
	// ErrAborted says a capture was aborted (Capture.Abort, or its
	// context ended: then the error wraps the context's cause too).
	ErrAborted = errors.New("image capture aborted")
)

// checkName refuses names that are not a single path element.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return ErrBadName
	}
	return nil
}

// IsPages reports whether name is a CRIU page file ("pages-N.img"), the
// files that hold memory contents.
func IsPages(name string) bool {
	return strings.HasPrefix(name, "pages-") && strings.HasSuffix(name, ".img")
}
