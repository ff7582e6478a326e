package daemon

import (
	"errors"

	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
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
	// The volume may not exist yet (a migration target receives it
	// later): mountRootfs mounts it just before the launch.
	if err := d.rt.PrepareIDMap(u.rootfs, *m); err != nil {
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
		d.rt.UnmountIDMapped(d.cfg.rootfsMount(name)),
		d.net.UnmountSysfs(d.cfg.sysfsDir(name)),
	)
}

// runIDMap is the runtime's form of an instance's recorded id map (nil for
// a privileged container).
func runIDMap(rec state.Instance) *runtime.IDMap {
	if privileged(rec) || rec.IDMap == nil {
		return nil
	}
	return &runtime.IDMap{HostUID: rec.IDMap.UID, HostGID: rec.IDMap.GID, Size: rec.IDMap.Size}
}
