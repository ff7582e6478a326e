package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// BuiltinAlias is the alias of the image assembled from busybox-static.
const BuiltinAlias = "busybox"

func imageRecord(md image.Metadata, aliases ...string) state.Image {
	return state.Image{
		Fingerprint:  md.Fingerprint,
		Aliases:      aliases,
		Size:         md.Size,
		Created:      md.Created,
		Source:       md.Source,
		OS:           state.OS(md.OS),
		Init:         md.Init,
		Env:          md.Env,
		Cwd:          md.Cwd,
		StopSignal:   md.StopSignal,
		Architecture: md.Architecture,
	}
}

func renderImage(img state.Image) api.Image {
	aliases := img.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return api.Image{
		Fingerprint:  img.Fingerprint,
		Aliases:      aliases,
		Size:         img.Size,
		Created:      img.Created,
		Source:       img.Source,
		OS:           api.OS(img.OS),
		Architecture: img.Architecture,
		StopSignal:   img.StopSignal,
		Init:         img.Init,
	}
}

// ensureBuiltinImage builds the busybox image on first start (no network
// needed). Rebuilding gives the same fingerprint for the same binary.
func (d *Daemon) ensureBuiltinImage(ctx context.Context) error {
	if img, err := d.state.ResolveImage(BuiltinAlias); err == nil && d.images.Has(img.Fingerprint) {
		return nil
	}
	md, err := d.images.BuildBusybox(ctx, d.cfg.Busybox)
	if err != nil {
		return fmt.Errorf("build the built-in image from %s: %w", d.cfg.Busybox, err)
	}
	return d.state.PutImage(imageRecord(md, BuiltinAlias))
}

// resolveImage finds an image by alias or fingerprint (prefix).
func (d *Daemon) resolveImage(ref string) (state.Image, error) {
	img, err := d.state.ResolveImage(ref)
	if errors.Is(err, state.ErrNotFound) {
		return img, errorf(ErrNotFound, "image %q not found (see 'vessel image list')", ref)
	}
	if errors.Is(err, state.ErrExists) {
		return img, errorf(ErrInvalid, "%w", err)
	}
	return img, err
}

// ensureImageVolume unpacks an image into a read-only volume the first
// time a container is made from it; later containers clone that volume.
func (d *Daemon) ensureImageVolume(ctx context.Context, fp string) error {
	unlock, err := d.imageLocks.Lock(ctx, fp)
	if err != nil {
		return err
	}
	defer unlock()
	vol := storage.Volume{Type: storage.VolumeImage, Name: fp}
	if d.storage.VolumeExists(vol) {
		return nil
	}
	r := revert.New()
	defer r.Fail()
	if err := d.storage.CreateVolume(ctx, vol); err != nil {
		return fmt.Errorf("image volume: %w", err)
	}
	r.Add(func() { d.undo("delete image volume", fp, d.storage.DeleteVolume(context.WithoutCancel(ctx), vol)) })
	if err := image.Unpack(ctx, d.images.Path(fp), d.storage.Path(vol)); err != nil {
		return fmt.Errorf("unpack image %.12s: %w", fp, err)
	}
	if err := d.storage.SetReadOnly(ctx, vol, true); err != nil {
		return err
	}
	r.Success()
	return nil
}

// ListImages returns every image.
func (d *Daemon) ListImages(ctx context.Context) ([]api.Image, error) {
	imgs, err := d.state.ListImages()
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, renderImage(img))
	}
	return out, nil
}

// GetImage returns one image by alias or fingerprint.
func (d *Daemon) GetImage(ctx context.Context, ref string) (api.Image, error) {
	img, err := d.resolveImage(ref)
	if err != nil {
		return api.Image{}, err
	}
	return renderImage(img), nil
}

// ImportImage stores an uploaded image: a rootfs tarball or a tarred OCI
// image layout (optionally compressed).
func (d *Daemon) ImportImage(ctx context.Context, r io.Reader, alias string) (api.Image, error) {
	if alias != "" {
		if err := ValidateName("image alias", alias); err != nil {
			return api.Image{}, err
		}
	}
	md, err := d.images.Import(ctx, r)
	if err != nil {
		if errors.Is(err, image.ErrInvalidImage) {
			return api.Image{}, errorf(ErrInvalid, "%w", err)
		}
		if errors.Is(err, image.ErrTooLarge) {
			return api.Image{}, errorf(api.ErrTooLarge, "%w", err)
		}
		return api.Image{}, err
	}
	return d.registerImage(md, alias)
}

func (d *Daemon) registerImage(md image.Metadata, alias string) (api.Image, error) {
	rec := imageRecord(md)
	if old, err := d.state.GetImage(md.Fingerprint); err == nil {
		rec.Aliases = old.Aliases
	}
	if alias != "" && !slices.Contains(rec.Aliases, alias) {
		rec.Aliases = append(rec.Aliases, alias)
	}
	if err := d.state.PutImage(rec); err != nil {
		return api.Image{}, err
	}
	return renderImage(rec), nil
}

// BuildImage builds an image on the host as an operation: "debian" with
// debootstrap from a Debian mirror, or "busybox" (the built-in, again).
func (d *Daemon) BuildImage(ctx context.Context, req api.ImageBuildPost) (*operations.Operation, error) {
	alias := req.Alias
	switch req.Distro {
	case "debian":
		if alias == "" {
			alias = "debian"
		}
	case "busybox":
		if alias == "" {
			alias = BuiltinAlias
		}
	default:
		return nil, errorf(ErrInvalid, "unknown distro %q (want debian or busybox)", req.Distro)
	}
	if err := ValidateName("image alias", alias); err != nil {
		return nil, err
	}
	res := map[string][]string{"images": {"/" + api.Version + "/images/" + alias}}
	return d.ops.Start(d.ctx, "Building image", res, func(ctx context.Context, op *operations.Operation) error {
		var md image.Metadata
		var err error
		if req.Distro == "busybox" {
			md, err = d.images.BuildBusybox(ctx, d.cfg.Busybox)
		} else {
			md, err = d.images.BuildDebian(ctx, image.DebianOptions{
				Suite: req.Suite, Mirror: req.Mirror,
				Progress: func(line string) { op.SetMetadata(map[string]any{"progress": line}) },
			})
		}
		if err != nil {
			return err
		}
		img, err := d.registerImage(md, alias)
		if err != nil {
			return err
		}
		op.SetMetadata(map[string]any{"fingerprint": img.Fingerprint})
		return nil
	}), nil
}

// DeleteImage removes an image, its file and its unpacked volume.
// Containers made from it are independent copies and are not affected.
func (d *Daemon) DeleteImage(ctx context.Context, ref string) error {
	img, err := d.resolveImage(ref)
	if err != nil {
		return err
	}
	unlock, err := d.imageLocks.Lock(ctx, img.Fingerprint)
	if err != nil {
		return err
	}
	defer unlock()
	for _, vol := range []storage.Volume{{Type: storage.VolumeImage, Name: img.Fingerprint}, vmImageVolume(img.Fingerprint)} {
		if err := d.storage.DeleteVolume(ctx, vol); err != nil {
			return err
		}
	}
	if err := d.images.Delete(img.Fingerprint); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return d.state.DeleteImage(img.Fingerprint)
}
