package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// CreateInstance validates a create (or launch) request and runs it as an
// operation. Bad input is refused before any work starts.
func (d *Daemon) CreateInstance(ctx context.Context, req api.InstancesPost) (*operations.Operation, error) {
	if err := ValidateName("instance", req.Name); err != nil {
		return nil, err
	}
	if req.Source.Type == "copy" {
		return d.copyInstance(ctx, req)
	}
	if req.Source.Type != "" && req.Source.Type != "image" {
		return nil, errorf(ErrInvalid, "unknown source type %q (want \"image\" or \"copy\")", req.Source.Type)
	}
	if req.Source.Image == "" {
		return nil, errorf(ErrInvalid, "no image given")
	}
	if err := validateConfig(req.Config); err != nil {
		return nil, err
	}
	img, err := d.resolveImage(req.Source.Image)
	if err != nil {
		return nil, err
	}
	if _, err := d.state.GetInstance(req.Name); err == nil {
		return nil, errorf(ErrConflict, "instance %q already exists", req.Name)
	}
	desc := "Creating instance"
	if req.Start {
		desc = "Launching instance"
	}
	return d.ops.Start(d.ctx, desc, instanceResources(req.Name), func(ctx context.Context, op *operations.Operation) error {
		return d.create(ctx, op, req, img)
	}), nil
}

func (d *Daemon) create(ctx context.Context, op *operations.Operation, req api.InstancesPost, img state.Image) error {
	unlock, err := d.lockInstance(ctx, req.Name)
	if err != nil {
		return err
	}
	defer unlock()
	defer d.setBusy(req.Name, api.StatusStarting)()

	r := revert.New()
	defer r.Fail()

	op.SetMetadata(map[string]any{"stage": "image"})
	if err := d.ensureImageVolume(ctx, img.Fingerprint); err != nil {
		return err
	}
	inst := state.Instance{
		Name:       req.Name,
		Image:      img.Fingerprint,
		Created:    time.Now().UTC(),
		Config:     maps.Clone(req.Config),
		Init:       img.Init,
		Env:        img.Env,
		Cwd:        img.Cwd,
		StopSignal: img.StopSignal,
		OS:         img.OS,
		State:      state.StateStopped,
	}
	if err := d.createRecord(&inst); err != nil {
		return err
	}
	r.Add(func() { _ = d.state.DeleteInstance(inst.Name) })

	op.SetMetadata(map[string]any{"stage": "rootfs"})
	vol := containerVolume(inst.Name)
	src := storage.Volume{Type: storage.VolumeImage, Name: img.Fingerprint}
	if err := d.storage.CloneVolume(ctx, vol, src, false); err != nil {
		return fmt.Errorf("create root filesystem: %w", err)
	}
	r.Add(func() { _ = d.storage.DeleteVolume(context.WithoutCancel(ctx), vol) })
	if err := d.finishCreate(ctx, op, inst, req.Start); err != nil {
		return err
	}
	r.Success()
	return nil
}

// finishCreate gives a new container's root filesystem its identity and
// starts the container if asked; the caller keeps or undoes its work.
func (d *Daemon) finishCreate(ctx context.Context, op *operations.Operation, inst state.Instance, start bool) error {
	if err := writeIdentity(d.storage.Path(containerVolume(inst.Name)), inst.Name); err != nil {
		return err
	}
	if start {
		op.SetMetadata(map[string]any{"stage": "start"})
		if err := d.startLocked(ctx, inst.Name); err != nil {
			return err
		}
	}
	op.SetMetadata(map[string]any{"stage": "done", "ipv4": inst.Address.String()})
	return nil
}

// createRecord allocates the instance's address and stores its record in
// one step, so concurrent creates never share an address or a name.
func (d *Daemon) createRecord(inst *state.Instance) error {
	d.addrMu.Lock()
	defer d.addrMu.Unlock()
	used, err := d.state.UsedAddresses()
	if err != nil {
		return err
	}
	addr, err := d.net.Allocate(used)
	if err != nil {
		return errorf(ErrConflict, "%w", err)
	}
	inst.Address = addr
	if err := d.state.CreateInstance(*inst); err != nil {
		if errors.Is(err, state.ErrExists) {
			return errorf(ErrConflict, "instance %q already exists", inst.Name)
		}
		return err
	}
	return nil
}

// writeIdentity gives a new root filesystem its hostname and hosts entry.
func writeIdentity(rootfs, name string) error {
	etc := filepath.Join(rootfs, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"hostname": name + "\n",
		"hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + name + "\n",
	}
	for f, content := range files {
		p := filepath.Join(etc, f)
		// Never follow a symlink planted in the image out of the rootfs.
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", f, err)
		}
	}
	return nil
}

// refreshOS re-reads the distribution from a container's root filesystem
// (it may have been upgraded inside).
func (d *Daemon) refreshOS(name string) state.OS {
	osr, err := image.ReadOSRelease(d.storage.Path(containerVolume(name)))
	if err != nil {
		return state.OS{}
	}
	return state.OS(osr)
}
