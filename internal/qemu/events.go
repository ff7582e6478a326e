package qemu

import (
	"context"
	"fmt"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Event is a QMP event: its name (RESET, SHUTDOWN, ...) and data.
type Event struct {
	Name string
	Data map[string]any
}

// Guest-visible events the daemon acts on.
const (
	// EventReset is a machine reset: the guest rebooted (data "guest":
	// true, "reason": "guest-reset"), or a reset came from the host.
	EventReset = "RESET"
	// EventShutdown is a guest's or the host's shutdown: QEMU ends next.
	EventShutdown = "SHUTDOWN"
)

// Events connects to the VM's events monitor (Config.EventsSocket) and
// returns its events until ctx ends or QEMU closes the connection; then
// the channel is closed. Unlike Connect it does not wait for the socket:
// QEMU has made it before Start returns, and a VM started by a vessel
// without the events monitor has none.
func Events(ctx context.Context, path string) (<-chan Event, error) {
	mon, err := qmp.NewSocketMonitor("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("qmp events %s: %w", path, err)
	}
	if err := mon.Connect(); err != nil {
		mon.Disconnect() //nolint:errcheck // failed handshake
		return nil, fmt.Errorf("qmp events %s: %w", path, err)
	}
	in, err := mon.Events(ctx)
	if err != nil {
		mon.Disconnect() //nolint:errcheck // nothing to do about it
		return nil, fmt.Errorf("qmp events %s: %w", path, err)
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		defer func() {
			mon.Disconnect() //nolint:errcheck // the end of the watch
			// go-qemu's reader blocks on an event nobody takes: drain it
			// until the closed connection ends it.
			for range in { //nolint:revive // draining
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- Event{Name: e.Event, Data: e.Data}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
