package daemon

import (
	"context"

	"github.com/vesselhost/vessel/internal/qemu"
)

// watchVMEvents reads a running VM's QMP events (its events monitor) until
// its QEMU ends. A guest's reboot is a machine reset QEMU survives: the VM
// stays running, and the agent session of the guest's previous boot is
// ended, so the next exec dials the new boot's agent. A guest's poweroff
// ends QEMU, which trackVM sees.
func (d *Daemon) watchVMEvents(name string, proc vmProcess) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-proc.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	events, err := d.vms.Events(ctx, qemu.Config{RunDir: d.cfg.vmRunDir(name)}.EventsSocket())
	if err != nil {
		// A VM started by a vessel without the events monitor: its
		// reboots are noticed when the agent session breaks.
		d.log.Warn("VM events not watched", "name", name, "err", err)
		return
	}
	// The agent is dialed at once (and after each reboot): its session
	// is ready for the first exec, and its time shows in the instance
	// (AgentReady).
	go d.dialAgent(ctx, name)
	for e := range events {
		switch e.Name {
		case qemu.EventReset:
			d.log.Info("VM reset (the guest rebooted)", "name", name, "reason", e.Data["reason"])
			d.agents.drop(name)
			go d.dialAgent(ctx, name)
		case qemu.EventShutdown:
			d.log.Info("VM shutting down", "name", name, "reason", e.Data["reason"])
		}
	}
}

// dialAgent makes the VM's agent session as soon as the guest answers.
func (d *Daemon) dialAgent(ctx context.Context, name string) {
	if _, err := d.agents.client(ctx, name, d.vmAgentSocket(name)); err != nil && ctx.Err() == nil {
		d.log.Warn("the VM's agent has not answered", "name", name, "err", err)
	}
}
