package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/identity"
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
	if req.Source.InstanceOnly {
		return nil, errorf(ErrInvalid, "instance_only applies to a copy of an instance, not to a create from an image")
	}
	if err := validateConfig(req.Config); err != nil {
		return nil, err
	}
	switch req.Type {
	case "", api.InstanceContainer, api.InstanceVM:
	default:
		return nil, errorf(ErrInvalid, "unknown instance type %q (want %q or %q)", req.Type, api.InstanceContainer, api.InstanceVM)
	}
	img, err := d.resolveImage(req.Source.Image)
	if err != nil {
		return nil, err
	}
	if d.insts.get(req.Name) != nil {
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

// create makes a new instance from an image: the record (state
// "creating", so a crash in the middle is undone at the next start), the
// image's volume if this is its first container, the container volume
// cloned from it, the identity files; then "stopped", and a start if asked.
func (d *Daemon) create(ctx context.Context, op *operations.Operation, req api.InstancesPost, img state.Image) error {
	op.SetMetadata(map[string]any{"stage": "image"})
	src := storage.Volume{Type: storage.VolumeImage, Name: img.Fingerprint}
	typ := ""
	if req.Type == api.InstanceVM {
		// A VM boots a disk built once per image; its volume is a clone.
		if err := d.ensureVMImageVolume(ctx, img.Fingerprint); err != nil {
			return err
		}
		src, typ = vmImageVolume(img.Fingerprint), state.TypeVM
	} else if err := d.ensureImageVolume(ctx, img.Fingerprint); err != nil {
		return err
	}
	rec := state.Instance{
		Name:       req.Name,
		Type:       typ,
		Image:      img.Fingerprint,
		Created:    time.Now().UTC(),
		Config:     maps.Clone(req.Config),
		Init:       img.Init,
		Env:        img.Env,
		Cwd:        img.Cwd,
		StopSignal: img.StopSignal,
		OS:         img.OS,
		State:      state.StateCreating,
	}
	return d.createFrom(ctx, op, rec, src, req.Start, nil)
}

// createFrom registers rec (state "creating"), clones src into its
// container volume, gives it its identity, runs fill (a copy's snapshots;
// it adds its own undo steps to r), commits "stopped" and starts it if
// asked. A failure undoes all of it.
func (d *Daemon) createFrom(ctx context.Context, op *operations.Operation, rec state.Instance, src storage.Volume, start bool,
	fill func(ctx context.Context, inst *instance, r *revert.Reverter) error) error {
	inst, release, err := d.register(rec, api.StatusStarting, false, nil)
	if err != nil {
		return err
	}
	defer release()
	r := revert.New()
	defer r.Fail()
	bg := context.WithoutCancel(ctx)
	r.Add(func() { d.undo("forget", inst.name, d.forget(inst)) })

	op.SetMetadata(map[string]any{"stage": "rootfs"})
	vol := containerVolume(inst.name)
	if err := d.storage.CloneVolume(ctx, vol, src, false); err != nil {
		if errors.Is(err, storage.ErrVolumeExists) {
			return errorf(ErrConflict, "a volume for %q exists already: %w", inst.name, err)
		}
		return fmt.Errorf("create root filesystem: %w", err)
	}
	r.Add(func() { d.undo("delete volume", inst.name, d.storage.DeleteVolume(bg, vol)) })
	d.crashAt(faultCreateVolume)
	// A VM's volume holds its disk: the guest's init names it from the
	// kernel command line (vessel.hostname=).
	if !rec.IsVM() {
		if err := writeIdentity(d.storage.Path(vol), inst.name); err != nil {
			return err
		}
	}
	if fill != nil {
		if err := fill(ctx, inst, r); err != nil {
			return err
		}
	}
	if err := d.setState(inst, state.StateStopped, nil); err != nil {
		return err
	}
	if start {
		op.SetMetadata(map[string]any{"stage": "start"})
		if err := d.startLocked(ctx, inst); err != nil {
			return err
		}
	}
	r.Success()
	op.SetMetadata(map[string]any{"stage": "done", "ipv4": inst.record().Address.String()})
	return nil
}

// writeIdentity gives a new root filesystem its hostname and hosts entry
// (writeName), and a machine identity of its own
// (identity.ResetMachineID).
func writeIdentity(rootfs, name string) error {
	return inRoot(rootfs, func(root *os.Root) error {
		if err := writeNameIn(root, name); err != nil {
			return err
		}
		return identity.ResetMachineID(root)
	})
}

// writeName gives a root filesystem the instance's name in /etc/hostname
// and /etc/hosts, and keeps its machine ID: the same machine under a new
// name (a move that renames, a snapshot restored after one).
func writeName(rootfs, name string) error {
	return inRoot(rootfs, func(root *os.Root) error { return writeNameIn(root, name) })
}

// inRoot runs f on an os.Root of the rootfs: a symlink the image or the
// container planted (/etc -> /some/host/dir, or /etc/hosts -> /host/file)
// either resolves inside the rootfs or fails the write; it is never
// followed out to the host.
func inRoot(rootfs string, f func(*os.Root) error) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	defer root.Close()
	if err := f(root); err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	return nil
}

func writeNameIn(root *os.Root, name string) error {
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	files := map[string]string{
		"hostname": name + "\n",
		"hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + name + "\n",
	}
	for f, content := range files {
		p := path.Join("etc", f)
		// A symlink in its place is replaced, not written through.
		if fi, err := root.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := root.Remove(p); err != nil {
				return fmt.Errorf("/%s: %w", p, err)
			}
		}
		if err := root.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("/%s: %w", p, err)
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
