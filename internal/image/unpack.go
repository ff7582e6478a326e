package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Unpack extracts the tar archive at tarPath (usually Store.Path of an
// image) into dst, an existing empty directory, with GNU tar: numeric
// owners, permissions, and all extended attributes are kept, so it must run
// as root to make a usable root filesystem. A missing archive is an error
// wrapping ErrNotFound; tar's failures carry its stderr.
//
// GNU tar refuses members with ".." elements and creates symbolic links
// with absolute or ".." targets only after everything else, so no member is
// written through a link to outside dst.
func Unpack(ctx context.Context, tarPath, dst string) error {
	if _, err := os.Stat(tarPath); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unpack %s: %w", tarPath, ErrNotFound)
		}
		return fmt.Errorf("unpack: %w", err)
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("unpack into %s: directory not empty", dst)
	}
	if err := tarExtract(ctx, tarExtractOptions{Archive: tarPath, Dir: dst}); err != nil {
		return fmt.Errorf("unpack %s: %w", tarPath, err)
	}
	return nil
}
