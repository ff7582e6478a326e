package daemon

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
)

// Limits (limits.* keys) live in the container's cgroup, PARENT/NAME. At
// start the daemon creates that cgroup and writes the limits before runc
// puts init in it (runc's own spec carries no limits, so it writes none),
// so no process of the container ever runs unlimited. A running
// container's limits change through UpdateInstance.

// instanceCgroup opens an instance's cgroup, PARENT/NAME.
func (d *Daemon) instanceCgroup(name string) (cgroups.Manager, error) {
	return d.cgroupsFor(d.cfg.cgroupPath(name))
}

// killCgroupTasks kills every task left in an instance's cgroups (after a
// restore that was stopped half way), thawing them first so the kill lands.
func (d *Daemon) killCgroupTasks(name string) {
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return
	}
	_ = cg.Thaw()
	for range 50 {
		pids, err := cg.Pids()
		if err != nil || len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.log.Warn("tasks of a stopped restore are still in its cgroup", "name", name)
}

// limitsFor converts a configuration, with the default limits filling the
// keys it does not set, to cgroup limits for the pool's devices. Disk
// limits need the devices; other limits do not.
func (d *Daemon) limitsFor(ctx context.Context, cfg map[string]string) (cgroups.Resources, error) {
	cfg = d.withDefaults(cfg)
	devs, err := d.storage.BlockDevices(ctx)
	if hasDiskLimits(cfg) {
		if err != nil {
			return cgroups.Resources{}, errorf(ErrConflict, "disk limits need the storage pool's block devices: %w", err)
		}
		if len(devs) == 0 {
			return cgroups.Resources{}, errorf(ErrConflict, "disk limits: the storage pool is on no block device")
		}
	} else if err != nil {
		devs = nil // nothing to limit or remove
	}
	return resourcesFromConfig(cfg, devs)
}

// applyLimits creates an instance's cgroup if needed and writes the limits
// of cfg to it (all of them: keys absent from cfg remove their limits).
// A CPU weight below minCPUWeight is raised to it (see startLocked).
func (d *Daemon) applyLimits(ctx context.Context, name string, cfg map[string]string, minCPUWeight uint64) error {
	res, err := d.limitsFor(ctx, cfg)
	if err != nil {
		return err
	}
	if w := max(res.CPUWeight, cgroups.DefaultCPUWeight); w < minCPUWeight {
		res.CPUWeight = minCPUWeight
	}
	if res.DiskWeight != 0 {
		if err := d.ensureBFQ(res.Devices); err != nil {
			return err
		}
	}
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return err
	}
	if err := cg.Create(); err != nil {
		return err
	}
	return cg.Set(res)
}

// ensureBFQ makes BFQ the I/O scheduler of the pool's own devices, so that
// disk weights apply there: its loop devices, which have none by default
// (they charge their I/O to the issuing cgroup, Linux 5.14+, so BFQ on the
// loop device sees each container), and the disk given as
// --storage-device, which is vessel's alone. On cgroup v2 that disk also
// gets BFQ's tunables for weights (cgroups.SetBFQTunables: low_latency
// off, slice_idle from --storage-device-idle): with BFQ's defaults two
// readers weighted 200:100 on the guest lane's QEMU-throttled disk split
// 1.0-1.6:1, with them 1.7-1.95:1 (ARCHITECTURE.md, Resource limits).
// v1 is left as it was. Other disks are the host's: their scheduler is
// reported (host info, vessel info NAME), not changed.
func (d *Daemon) ensureBFQ(devs []cgroups.DeviceLimit) error {
	storage := d.storageDeviceNumber()
	for _, dl := range devs {
		dev := fmt.Sprintf("%d:%d", dl.Major, dl.Minor)
		if !cgroups.IsLoop(dev) && dev != storage {
			continue
		}
		if err := cgroups.SetScheduler(dev, "bfq"); err != nil {
			return errorf(ErrConflict, "disk weight: %w", err)
		}
		if dev == storage && cgroups.HostVersion() == cgroups.V2 {
			if err := cgroups.SetBFQTunables(dev, d.cfg.StorageDeviceIdle); err != nil {
				return errorf(ErrConflict, "disk weight: %w", err)
			}
		}
	}
	return nil
}

// storageDeviceNumber returns the "MAJ:MIN" of Config.StorageDevice ("" if
// none).
func (d *Daemon) storageDeviceNumber() string {
	if d.cfg.StorageDevice == "" {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat(d.cfg.StorageDevice, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return ""
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

// resetLoopSchedulers gives the pool's loop devices back the kernel's
// default scheduler before the pool is released.
func (d *Daemon) resetLoopSchedulers(ctx context.Context) {
	devs, err := d.storage.BlockDevices(ctx)
	if err != nil {
		return
	}
	for _, dev := range devs {
		if active, _, err := cgroups.Scheduler(dev); err == nil && active == "bfq" && cgroups.IsLoop(dev) {
			if err := cgroups.SetScheduler(dev, "none"); err != nil {
				d.log.Warn("reset I/O scheduler", "device", dev, "err", err)
			}
		}
	}
}

// storageDevices describes the pool's block devices for host info.
func (d *Daemon) storageDevices(ctx context.Context) []api.BlockDevice {
	devs, err := d.storage.BlockDevices(ctx)
	if err != nil {
		return nil
	}
	out := make([]api.BlockDevice, 0, len(devs))
	for _, dev := range devs {
		active, _, _ := cgroups.Scheduler(dev)
		out = append(out, api.BlockDevice{Device: dev, Name: cgroups.DeviceName(dev), Scheduler: active})
	}
	return out
}

// instanceState converts cgroup usage to the API's live state.
func instanceState(path string, st cgroups.Stats) *api.InstanceState {
	out := &api.InstanceState{
		CPUUsageNS:  st.CPUUsage,
		MemoryUsage: st.MemoryUsage,
		MemoryLimit: st.MemoryLimit,
		Processes:   st.Pids,
		Cgroup:      path,
		OOMKills:    st.OOMKills,
	}
	for _, io := range st.IO {
		sched, _, _ := cgroups.Scheduler(io.Device)
		out.IO = append(out.IO, api.InstanceIO{
			Device: io.Device, Name: io.Name, Scheduler: sched,
			ReadBytes: io.ReadBytes, WriteBytes: io.WriteBytes, ReadOps: io.ReadOps, WriteOps: io.WriteOps,
		})
	}
	return out
}
