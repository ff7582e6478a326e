package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// unpackLayout extracts the OCI image layout archived in the tar file at
// archive into the empty directory dir. A layout holds only directories
// and regular files; any other member, or a member escaping dir, fails with
// ErrInvalidImage. Files are written through an os.Root, so nothing lands
// outside dir whatever the archive says.
func unpackLayout(ctx context.Context, archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidImage, err)
		}
		if err := unpackLayoutMember(root, hdr, tr); err != nil {
			return err
		}
	}
}

// unpackLayoutMember writes one member of a layout archive under root.
func unpackLayoutMember(root *os.Root, hdr *tar.Header, content io.Reader) error {
	name, err := cleanMemberName(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir:
		if name == "" {
			return nil
		}
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg: // the reader reports old-style regular files (TypeRegA) as TypeReg
		if d := parentDir(name); d != "" {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, content)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return fmt.Errorf("%w: oci layout member %q is not a regular file or directory", ErrInvalidImage, hdr.Name)
}
