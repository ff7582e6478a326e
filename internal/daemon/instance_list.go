package daemon

import (
	"cmp"
	"context"
	"fmt"
	"maps"

	"github.com/vesselhost/vessel/internal/api"
)

// render turns an instance into what the API shows.
func (d *Daemon) render(inst *instance) api.Instance {
	rec := inst.record()
	status, run := inst.status()
	out := api.Instance{
		Name:       rec.Name,
		Type:       cmp.Or(rec.Type, api.InstanceContainer),
		Status:     status,
		Image:      rec.Image,
		Created:    rec.Created,
		LastStart:  rec.LastStart,
		Config:     maps.Clone(rec.Config),
		OS:         api.OS(rec.OS),
		Location:   d.cfg.Name,
		StopSignal: rec.StopSignal,
		Privileged: privileged(rec),
	}
	if m := rec.IDMap; m != nil && !out.Privileged {
		out.IDMap = fmt.Sprintf("%d:%d+%d", m.UID, m.GID, m.Size)
	}
	if out.Config == nil {
		out.Config = map[string]string{}
	}
	out.Defaults = d.defaultsFor(out.Config)
	if rec.Address.IsValid() {
		out.IPv4 = rec.Address.String()
	}
	if run != nil {
		out.PID = run.proc.InitPid
		if run.vm != nil {
			out.PID = run.vm.Pid()
			out.AgentReady = d.agents.readySince(rec.Name)
		}
	}
	if e := rec.LastExit; e != nil {
		out.LastExit = &api.InstanceExit{Status: e.Status, Signal: e.Signal, Time: e.Time}
	}
	return out
}

// ListInstances returns every instance. It reads only the registry (the
// records and live handles held in memory), so it stays fast whatever the
// containers do and never waits for an action.
func (d *Daemon) ListInstances(ctx context.Context) ([]api.Instance, error) {
	insts := d.insts.list()
	out := make([]api.Instance, 0, len(insts))
	for _, inst := range insts {
		out = append(out, d.render(inst))
	}
	return out, nil
}

// GetInstance returns one instance with its live usage.
func (d *Daemon) GetInstance(ctx context.Context, name string) (api.Instance, error) {
	inst, err := d.instance(name)
	if err != nil {
		return api.Instance{}, err
	}
	out := d.render(inst)
	if j, ok, err := d.state.GetMigration(name); err == nil && ok {
		out.Migration = &api.InstanceMigration{Role: j.Role, Phase: j.Phase, Peer: j.Peer, Started: j.Started}
	}
	if out.PID != 0 {
		if cg, err := d.instanceCgroup(name); err == nil {
			if st, err := cg.Stats(); err == nil {
				out.State = instanceState(cg.Path(), st)
			}
		}
	}
	return out, nil
}
