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
	for e := range events {
		switch e.Name {
		case qemu.EventReset:
			d.log.Info("VM reset (the guest rebooted)", "name", name, "reason", e.Data["reason"])
			d.agents.drop(name)
		case qemu.EventShutdown:
			d.log.Info("VM shutting down", "name", name, "reason", e.Data["reason"])
		}
	}
}
