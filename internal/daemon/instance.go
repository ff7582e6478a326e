package daemon

import (
	"context"
	"errors"
	"maps"
	"syscall"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

func containerVolume(name string) storage.Volume {
	return storage.Volume{Type: storage.VolumeContainer, Name: name}
}

func (d *Daemon) instanceCgroup(name string) (cgroups.Manager, error) {
	return cgroups.New(d.cfg.cgroupPath(name))
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

// getRecord returns an instance's record, mapping a missing one to
// ErrNotFound with a clear message.
func (d *Daemon) getRecord(name string) (state.Instance, error) {
	inst, err := d.state.GetInstance(name)
	if errors.Is(err, state.ErrNotFound) {
		return inst, errorf(ErrNotFound, "instance %q not found", name)
	}
	return inst, err
}

// status returns what list shows: a busy status while an action works on
// the instance, else Running or Stopped from the live view.
func (d *Daemon) status(name string) (string, *running) {
	d.mu.Lock()
	defer d.mu.Unlock()
	run := d.live[name]
	if b, ok := d.busy[name]; ok {
		return b, run
	}
	if run != nil {
		return api.StatusRunning, run
	}
	return api.StatusStopped, nil
}

func (d *Daemon) render(inst state.Instance) api.Instance {
	status, run := d.status(inst.Name)
	out := api.Instance{
		Name:       inst.Name,
		Status:     status,
		Image:      inst.Image,
		Created:    inst.Created,
		LastStart:  inst.LastStart,
		Config:     maps.Clone(inst.Config),
		OS:         api.OS(inst.OS),
		Location:   d.cfg.Name,
		StopSignal: inst.StopSignal,
	}
	if out.Config == nil {
		out.Config = map[string]string{}
	}
	if inst.Address.IsValid() {
		out.IPv4 = inst.Address.String()
	}
	if run != nil {
		out.PID = run.proc.InitPid
	}
	if e := inst.LastExit; e != nil {
		out.LastExit = &api.InstanceExit{Status: e.Status, Signal: e.Signal, Time: e.Time}
	}
	return out
}

// ListInstances returns every instance. It reads only the state store and
// the in-memory live view, so it stays fast whatever the containers do.
func (d *Daemon) ListInstances(ctx context.Context) ([]api.Instance, error) {
	insts, err := d.state.ListInstances()
	if err != nil {
		return nil, err
	}
	out := make([]api.Instance, 0, len(insts))
	for _, inst := range insts {
		out = append(out, d.render(inst))
	}
	return out, nil
}

// GetInstance returns one instance with its live usage.
func (d *Daemon) GetInstance(ctx context.Context, name string) (api.Instance, error) {
	inst, err := d.getRecord(name)
	if err != nil {
		return api.Instance{}, err
	}
	out := d.render(inst)
	if out.PID != 0 {
		if cg, err := d.instanceCgroup(name); err == nil {
			if st, err := cg.Stats(); err == nil {
				out.State = instanceState(cg.Path(), st)
			}
		}
	}
	return out, nil
}
