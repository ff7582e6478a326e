package daemon

import (
	"errors"
	"os"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
)

// The control plane's own share of the CPU (XenServer's lesson): vesseld
// moves itself into a control cgroup beside the containers' parent, e.g.
// /vessel-control next to /vessel, whose CPU weight is 10x the parent's.
// Under full load an API call then gets CPU at once, and while the control
// plane is idle the containers lose nothing (weights only matter under
// contention). Helper processes vesseld starts (runc, btrfs, iptables) are
// born there. Shims are moved to PARENT/_shims once their container runs
// (runtime.Config.ShimCgroup): copying console output is data path.
//
// On v1 the control cgroup exists in the cpu and cpuacct hierarchies only:
// the weight is about CPU, and vesseld stays in whatever memory, pids or
// blkio cgroup its supervisor gave it. On v2 there is one hierarchy.

// controlCPUWeight is the control cgroup's effective CPU weight.
func (d *Daemon) controlCPUWeight() uint64 {
	if d.cfg.ControlCPUWeight == 0 {
		return cgroups.DefaultCPUWeight
	}
	return d.cfg.ControlCPUWeight
}

// enterControlCgroup creates the control cgroup, sets its weight and moves
// vesseld into it. The containers' parent gets the default weight.
func (d *Daemon) enterControlCgroup() error {
	if d.cfg.ControlCgroup == NoControlCgroup {
		// Whoever placed vesseld owns both weights: under systemd,
		// vessel-control.slice and vessel.slice (the containers' parent
		// is then a delegated unit's cgroup, whose own files are
		// systemd's).
		return nil
	}
	if err := d.cgParent.Set(cgroups.Resources{}); err != nil {
		return err
	}
	cg, err := cgroups.New(d.cfg.ControlCgroup, cgroups.Controllers("cpu", "cpuacct"))
	if err != nil {
		return err
	}
	if err := cg.Create(); err != nil {
		return err
	}
	if err := cg.Set(cgroups.Resources{CPUWeight: d.controlCPUWeight()}); err != nil {
		_ = cg.Destroy()
		return err
	}
	leave, err := cgroups.Enter(cg)
	if err != nil {
		_ = cg.Destroy()
		return err
	}
	d.control, d.leaveControl = cg, leave
	d.log.Info("control plane cgroup", "cgroup", cg.Path(), "cpu_weight", d.controlCPUWeight(),
		"containers", d.cfg.CgroupParent, "containers_cpu_weight", cgroups.DefaultCPUWeight)
	return nil
}

// leaveControlCgroup moves vesseld back where it started and removes the
// control cgroup (it fails, and stays, if a helper process still runs in
// it).
func (d *Daemon) leaveControlCgroup() error {
	if d.control == nil {
		return nil
	}
	err := errors.Join(d.leaveControl(), d.control.Destroy())
	d.control, d.leaveControl = nil, nil
	return err
}

// controlPlane describes the control cgroup for host info. When vesseld
// stays where it was started (under systemd: vesseld.service in
// vessel-control.slice), it reports that cgroup and the weights that decide
// between it and the containers (the sibling cgroups holding each, e.g.
// vessel-control.slice and vessel-instances.service), read from the kernel.
func (d *Daemon) controlPlane() api.ControlPlane {
	out := api.ControlPlane{ContainersCgroup: d.cfg.CgroupParent, ContainersCPUWeight: cgroups.DefaultCPUWeight}
	if d.control != nil {
		out.Cgroup = d.control.Path()
		out.CPUWeight = d.controlCPUWeight()
		return out
	}
	own, err := cgroups.ProcessCgroup(os.Getpid(), "cpu")
	if err != nil || own == "/" {
		return out
	}
	out.Cgroup = own
	if wc, wp, err := cgroups.SiblingCPUWeights(own, d.cfg.CgroupParent); err == nil {
		out.CPUWeight, out.ContainersCPUWeight = wc, wp
	}
	return out
}

// startCPUWeight is the CPU weight a container's cgroup has while it
// starts: the control plane's (0: no boost). The boost ends when init runs,
// by lowering the weight of a cgroup whose processes may already run:
// with the highest weight (10000, a 100x drop afterwards) boot storms
// under load stalled for seconds in 4 of 7 runs (bench/bootstorm), with
// 1000 they did not.
func (d *Daemon) startCPUWeight() uint64 {
	return d.cfg.ControlCPUWeight
}

// favorDynMods turns on cgroup2's favordynmods (see Config.FavorDynMods).
// A host without it only starts, execs and restores a little slower, so a
// failure is logged, not fatal.
func (d *Daemon) favorDynMods() {
	mp, err := cgroups.FavorDynMods()
	switch {
	case errors.Is(err, cgroups.ErrNoCgroup2):
		d.log.Info("no cgroup2 tree mounted: cgroup moves keep waiting for RCU grace periods")
	case err != nil:
		d.log.Warn("cgroup2 favordynmods not turned on", "err", err)
	case mp != "":
		d.log.Info("cgroup2 favordynmods turned on (host-wide)", "mount", mp)
	}
}
