package image

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Import stores the image read from r: a rootfs tarball, or an OCI image
// layout packed as a tar archive (one with the files oci-layout and
// index.json at its top; its first manifest is imported, see
// ImportOCILayout). Either may be compressed with gzip, xz, zstd or bzip2.
//
// A rootfs tarball must be a system image: its /sbin/init decides the stop
// signal (busybox SIGUSR2, systemd SIGRTMIN+3, sysvinit SIGPWR, anything
// else SIGTERM). Bad input (not a tar, empty, members escaping the root, no
// /sbin/init) fails with ErrInvalidImage.
func (s *Store) Import(ctx context.Context, r io.Reader) (Metadata, error) {
	dr, err := decompress(ctx, r)
	if err != nil {
		return Metadata{}, fmt.Errorf("import image: %w", err)
	}
	defer dr.Close()
	st, err := s.stage(ctx, dr)
	if err != nil {
		return Metadata{}, fmt.Errorf("import image: %w", err)
	}
	defer st.discard()

	if st.tree.isOCILayout() {
		return s.importPackedLayout(ctx, st.tmp)
	}
	md, err := st.systemMetadata(SourceTarball)
	if err != nil {
		return Metadata{}, fmt.Errorf("import image: %w", err)
	}
	if err := s.commit(st); err != nil {
		return Metadata{}, err
	}
	return md, nil
}

// importPackedLayout unpacks the OCI image layout archived in the tar file
// at archive into a temporary directory of the store and imports it.
func (s *Store) importPackedLayout(ctx context.Context, archive string) (Metadata, error) {
	dir, err := os.MkdirTemp(s.dir, tmpPrefix+"layout-*")
	if err != nil {
		return Metadata{}, fmt.Errorf("import oci layout: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := unpackLayout(ctx, archive, dir); err != nil {
		return Metadata{}, fmt.Errorf("import oci layout: %w", err)
	}
	return s.ImportOCILayout(ctx, dir, "")
}
