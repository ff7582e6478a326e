package image

import (
	"context"
	"fmt"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// refNameAnnotation names an image in an OCI layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// ImportOCILayout stores the image of the OCI image layout in directory
// dir, its layers flattened into one rootfs (whiteouts applied).
//
// ref selects a manifest of the layout's index.json by its
// "org.opencontainers.image.ref.name" annotation (or by digest,
// "sha256:..."); "" selects the first one. If that manifest is a
// multi-platform index, the linux image for this host's architecture is
// taken from it. No matching manifest is an error wrapping ErrInvalidImage.
//
// Metadata comes from the image config: Init is Entrypoint followed by Cmd
// (or /sbin/init when neither is set and the rootfs has one), Env always
// sets PATH, Cwd is WorkingDir, and StopSignal is the config's StopSignal,
// else the stop signal of the image's init when Init is /sbin/init, else
// SIGTERM.
func (s *Store) ImportOCILayout(ctx context.Context, dir string, ref string) (Metadata, error) {
	img, err := selectLayoutImage(dir, ref)
	if err != nil {
		return Metadata{}, fmt.Errorf("import oci layout %s: %w", dir, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Metadata{}, fmt.Errorf("import oci layout %s: %w: config: %w", dir, ErrInvalidImage, err)
	}
	rc := mutate.Extract(img)
	st, err := s.stage(ctx, rc)
	rc.Close()
	if err != nil {
		return Metadata{}, fmt.Errorf("import oci layout %s: %w", dir, err)
	}
	defer st.discard()
	md, err := st.ociMetadata(cf)
	if err != nil {
		return Metadata{}, fmt.Errorf("import oci layout %s: %w", dir, err)
	}
	if err := s.commit(st); err != nil {
		return Metadata{}, err
	}
	return md, nil
}

// selectLayoutImage finds the image ref names in the layout at dir (see
// ImportOCILayout).
func selectLayoutImage(dir, ref string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: index.json: %w", ErrInvalidImage, err)
	}
	for _, d := range im.Manifests {
		if ref == "" || d.Annotations[refNameAnnotation] == ref || d.Digest.String() == ref {
			return descriptorImage(idx, d)
		}
	}
	if ref == "" {
		return nil, fmt.Errorf("%w: index.json lists no manifests", ErrInvalidImage)
	}
	return nil, fmt.Errorf("%w: no manifest named %q", ErrInvalidImage, ref)
}

// descriptorImage returns the image d describes: the image itself, or for a
// multi-platform index the linux image for this host's architecture.
func descriptorImage(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	switch {
	case d.MediaType.IsImage():
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
		}
		return img, nil
	case d.MediaType.IsIndex():
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("%w: index %s: %w", ErrInvalidImage, d.Digest, err)
		}
		for _, c := range cm.Manifests {
			if c.MediaType.IsImage() && c.Platform != nil &&
				c.Platform.OS == "linux" && c.Platform.Architecture == runtime.GOARCH {
				img, err := child.Image(c.Digest)
				if err != nil {
					return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
				}
				return img, nil
			}
		}
		return nil, fmt.Errorf("%w: index %s has no linux/%s image", ErrInvalidImage, d.Digest, runtime.GOARCH)
	}
	return nil, fmt.Errorf("%w: manifest %s has unsupported media type %q", ErrInvalidImage, d.Digest, d.MediaType)
}

// ociMetadata derives an OCI image's metadata from its config and its
// flattened rootfs.
func (st *staged) ociMetadata(cf *v1.ConfigFile) (Metadata, error) {
	c := cf.Config
	kind := st.tree.detectInit()
	md := st.baseMetadata(SourceOCI)
	md.Init = append(append([]string(nil), c.Entrypoint...), c.Cmd...)
	if len(md.Init) == 0 {
		if kind == initNone {
			return Metadata{}, fmt.Errorf("%w: no entrypoint, cmd or /sbin/init", ErrInvalidImage)
		}
		md.Init = []string{"/sbin/init"}
	}
	md.Env = ensurePath(c.Env)
	if c.WorkingDir != "" {
		md.Cwd = c.WorkingDir
	}
	md.StopSignal = "SIGTERM"
	if md.Init[0] == "/sbin/init" && kind != initNone {
		md.StopSignal = kind.stopSignal()
	}
	if c.StopSignal != "" {
		md.StopSignal = normalizeSignal(c.StopSignal)
	}
	if cf.Architecture != "" {
		md.Architecture = cf.Architecture
	}
	return md, nil
}
