package daemon

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/state"
)

// TestVMRebootKeepsItRunning: a guest's reboot (QEMU's RESET event) leaves
// the VM running, ends the agent session of the previous boot and dials
// the new boot's agent; the instance shows when it answered.
func TestVMRebootKeepsItRunning(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", td.vmAgentSocket("vm1"))
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { _ = (&agent.Server{}).ServeConn(c) }()
		}
	}()
	defer func() {
		_ = l.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func() {
		t.Helper()
		if code, err := td.Exec(ctx, "vm1", api.ExecPost{Command: []string{"true"}, Cwd: "/"}, api.ExecIO{}); err != nil || code != 0 {
			t.Fatalf("exec: %d %v", code, err)
		}
	}
	exec()
	exec()
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d agent connections before the reboot", n)
	}
	i, err := td.GetInstance(ctx, "vm1")
	if err != nil || i.AgentReady.IsZero() {
		t.Fatalf("agent readiness before the reboot: %v %v", i.AgentReady, err)
	}
	v := td.fvm.vm("vm1")
	select {
	case v.events <- qemu.Event{Name: qemu.EventReset, Data: map[string]any{"guest": true, "reason": "guest-reset"}}:
	case <-ctx.Done():
		t.Fatal("nobody watches the VM's events")
	}
	// The previous boot's session is ended and the agent dialed again.
	deadline := time.Now().Add(waitBound)
	for conns.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the agent was not dialed again after the guest's reboot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := td.status(t, "vm1"); s != api.StatusRunning {
		t.Fatalf("after the reboot: %s", s)
	}
	exec()
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d agent connections after the reboot, want 2", n)
	}
	if j, err := td.GetInstance(ctx, "vm1"); err != nil || !j.AgentReady.After(i.AgentReady) {
		t.Fatalf("agent readiness after the reboot: %v (before: %v) %v", j.AgentReady, i.AgentReady, err)
	}
}
