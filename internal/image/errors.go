package image

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidImage means the input cannot be made into an image: it is
	// not a tar archive, it is empty, a member escapes the root, it has no
	// usable root filesystem (no /sbin/init and no entrypoint), or an OCI
	// layout has no matching manifest. It is always wrapped with detail.
	ErrInvalidImage = errors.New("invalid image")

	// ErrTooLarge means the image, once decompressed, is larger than the
	// store accepts (Store.MaxSize): a decompression bomb stops there.
	ErrTooLarge = errors.New("image too large")

	// ErrNotFound means no image with the given fingerprint is stored.
	ErrNotFound = errors.New("image not found")
)

// toolError wraps the error of a failed external command with the command's
// name and what it printed on stderr.
func toolError(name string, err error, stderr string) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		return fmt.Errorf("%s: %w", name, err)
	}
	return fmt.Errorf("%s: %w: %s", name, err, msg)
}
