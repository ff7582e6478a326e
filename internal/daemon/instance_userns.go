package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
)

// usernsRun is what an unprivileged container runs on: its user
// namespace's map, its idmapped rootfs and its sysfs.
type usernsRun struct {
	idmap  *runtime.IDMap
	rootfs string
	sysfs  string
}

// prepareUserns mounts an unprivileged container's sysfs and idmapped
// rootfs (nil for a privileged one); r undoes it.
func (d *Daemon) prepareUserns(inst *instance, r *revert.Reverter) (*usernsRun, error) {
	m, err := d.ensureIDMap(inst)
	if err != nil || m == nil {
		return nil, err
	}
	name := inst.name
	u := &usernsRun{idmap: m, rootfs: d.cfg.rootfsMount(name), sysfs: d.cfg.sysfsDir(name)}
	r.Add(func() { d.undo("unmount the rootfs and sysfs", name, d.releaseUserns(name)) })
	if err := d.net.MountSysfs(name, u.sysfs); err != nil {
		return nil, err
	}
	// Only the container's root may pass: runc's init, in the container's
	// user namespace, must reach the rootfs; other host users must not.
	dir := d.cfg.rootfsDir(name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("rootfs mount point: %w", err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("rootfs mount point: %w", err)
	}
	if err := os.MkdirAll(u.rootfs, 0o700); err != nil {
		return nil, fmt.Errorf("rootfs mount point: %w", err)
	}
	if err := os.Chown(dir, int(m.HostUID), int(m.HostGID)); err != nil {
		return nil, fmt.Errorf("rootfs mount point: %w", err)
	}
	if err := os.Chmod(dir, 0o100); err != nil {
		return nil, fmt.Errorf("rootfs mount point: %w", err)
	}
	// The volume may not exist yet (a migration target receives it
	// later): mountRootfs mounts it just before the launch.
	if err := d.rt.PrepareIDMap(*m); err != nil {
		return nil, err
	}
	r.Add(func() { d.rt.ReleaseIDMap(*m) })
	return u, nil
}

// mountRootfs makes an unprivileged container's idmapped rootfs mount.
func (d *Daemon) mountRootfs(name string, u *usernsRun) error {
	return d.rt.MountIDMapped(d.storage.Path(containerVolume(name)), u.rootfs, *u.idmap)
}

// releaseUserns unmounts an unprivileged container's rootfs and sysfs and
// removes their mount points; nothing there is not an error.
func (d *Daemon) releaseUserns(name string) error {
	if inst := d.insts.get(name); inst != nil {
		if m := inst.record().IDMap; m != nil {
			d.rt.ReleaseIDMap(runtime.IDMap{HostUID: m.UID, HostGID: m.GID, Size: m.Size})
		}
	}
	return errors.Join(
		runtime.UnmountIDMapped(d.cfg.rootfsMount(name)),
		removeEmpty(d.cfg.rootfsMount(name)),
		removeEmpty(d.cfg.rootfsDir(name)),
		network.UnmountSysfs(d.cfg.sysfsDir(name), true),
	)
}

func removeEmpty(dir string) error {
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// shareImages lets an unprivileged container's restore read its checkpoint
// images: CRIU's restored tasks open some of them after they have become
// the container's root, which is not the host's. The directory gets the
// container's root group (search and read) and every image is readable by
// that group; nobody else gains access.
func (d *Daemon) shareImages(inst *instance, dir string) error {
	m := inst.record().IDMap
	if m == nil || privileged(inst.record()) {
		return nil
	}
	if err := os.Chown(dir, 0, int(m.GID)); err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o040 == 0 {
			p := dir + "/" + e.Name()
			if err := os.Chown(p, 0, int(m.GID)); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
			if err := os.Chmod(p, fi.Mode().Perm()|0o040); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
		}
	}
	return nil
}

// checkPeerImages refuses a peer's checkpoint of an unprivileged container
// unless it restores into that container's user namespace, as recorded.
func (d *Daemon) checkPeerImages(inst *instance, dir string) error {
	rec := inst.record()
	if privileged(rec) || rec.IDMap == nil {
		return nil // a privileged container: admitPeerInstance let it in
	}
	m := runtime.IDMap{HostUID: rec.IDMap.UID, HostGID: rec.IDMap.GID, Size: rec.IDMap.Size}
	if err := runtime.CheckUserns(dir, m); err != nil {
		return errorf(ErrForbidden, "%w", err)
	}
	return nil
}
