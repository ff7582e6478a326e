package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Monitor is a QMP connection to a VM's QEMU. Its typed helpers are the
// commands the VM lifecycle needs; Run (go-qemu's, raw JSON in and out)
// serves the rest (the snapshot code's own helpers use it).
type Monitor struct {
	*qmp.SocketMonitor
	// migration, once WatchMigration has run, has a value at each of
	// QEMU's MIGRATION events: WaitMigration wakes on it.
	migration chan struct{}
}

// Connect opens the QMP socket at path and negotiates capabilities. It
// retries while QEMU is still creating the socket, until ctx ends.
func Connect(ctx context.Context, path string) (*Monitor, error) {
	for {
		mon, err := qmp.NewSocketMonitor("unix", path, 5*time.Second)
		if err == nil {
			if err = mon.Connect(); err == nil {
				return &Monitor{SocketMonitor: mon}, nil
			}
			mon.Disconnect() //nolint:errcheck // failed handshake
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp %s: %w (last error: %w)", path, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close ends the connection (QEMU keeps running).
func (m *Monitor) Close() error { return m.Disconnect() }

// Execute runs command with args (nil: none) and decodes its "return"
// into ret (nil: ignored). It gives up waiting when ctx ends (the
// connection must then be closed: a late reply would answer the next
// command).
func (m *Monitor) Execute(ctx context.Context, command string, args any, ret any) error {
	// qmp.Command sends "arguments": null for none, which QEMU refuses.
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	type result struct {
		raw []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		raw, err := m.Run(b)
		ch <- result{raw, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
	if r.err != nil {
		return fmt.Errorf("qmp %s: %w", command, r.err)
	}
	if ret == nil {
		return nil
	}
	var env struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.raw, &env); err != nil {
		return fmt.Errorf("qmp %s: reply: %w", command, err)
	}
	if err := json.Unmarshal(env.Return, ret); err != nil {
		return fmt.Errorf("qmp %s: reply: %w", command, err)
	}
	return nil
}

// Status is query-status's reply.
type Status struct {
	Running bool `json:"running"`
	// Status is QEMU's run state: "running", "paused", "prelaunch",
	// "shutdown", "inmigrate", ...
	Status string `json:"status"`
}

// QueryStatus asks the VM's run state.
func (m *Monitor) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// Cont lets the vCPUs run (after -S, or a stop).
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// Stop pauses the vCPUs.
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// SystemPowerdown presses the ACPI power button: the guest shuts down if
// it listens.
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// Quit ends QEMU at once.
func (m *Monitor) Quit(ctx context.Context) error { return m.Execute(ctx, "quit", nil, nil) }

// IOThrottle is block_set_io_throttle's limits (0: unlimited).
type IOThrottle struct {
	// ID is the qdev id of the block device (the root disk's "root-disk").
	ID     string `json:"id"`
	BPS    int64  `json:"bps"`
	BPSRd  int64  `json:"bps_rd"`
	BPSWr  int64  `json:"bps_wr"`
	IOPS   int64  `json:"iops"`
	IOPSRd int64  `json:"iops_rd"`
	IOPSWr int64  `json:"iops_wr"`
	// Group names the throttle group (one per VM).
	Group string `json:"group,omitempty"`
}

// RootDiskID is the qdev id Args gives the root disk.
const RootDiskID = "root-disk"

// SetIOThrottle sets a disk's I/O limits (all zero: none).
func (m *Monitor) SetIOThrottle(ctx context.Context, t IOThrottle) error {
	return m.Execute(ctx, "block_set_io_throttle", t, nil)
}
