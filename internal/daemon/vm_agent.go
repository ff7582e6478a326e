package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/runtime"
)

// agentWait bounds the wait for a VM's agent to answer (a guest booting
// under TCG takes tens of seconds).
const agentWait = 2 * time.Minute

// vmAgents holds one agent session per running VM: a virtio-serial
// chardev takes one host connection at a time, so the daemon's requests
// to a VM share it (one yamux stream each). The zero value is ready.
type vmAgents struct {
	mu  sync.Mutex
	vms map[string]*vmAgent
	// ready holds each VM's live session and when it was made (the
	// agent's first answer since the guest booted, or since vesseld
	// started), readable without waiting for a dial in progress.
	ready map[string]agentReady
}

type agentReady struct {
	at time.Time
	c  *agent.Client
}

// readySince says when the VM's current agent session was made (zero:
// none, or it ended).
func (a *vmAgents) readySince(name string) time.Time {
	a.mu.Lock()
	r, ok := a.ready[name]
	a.mu.Unlock()
	if !ok {
		return time.Time{}
	}
	select {
	case <-r.c.Done():
		return time.Time{}
	default:
		return r.at
	}
}

// vmAgent is one VM's session; mu serializes dialing it.
type vmAgent struct {
	mu sync.Mutex
	c  *agent.Client
}

func (a *vmAgents) vm(name string) *vmAgent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.vms == nil {
		a.vms = map[string]*vmAgent{}
	}
	v := a.vms[name]
	if v == nil {
		v = &vmAgent{}
		a.vms[name] = v
	}
	return v
}

// client returns the VM's session, dialing its agent's socket (QEMU's
// chardev) when there is none or the last one ended.
func (a *vmAgents) client(ctx context.Context, name, socket string) (*agent.Client, error) {
	v := a.vm(name)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.c != nil {
		select {
		case <-v.c.Done():
			v.c = nil
		default:
			return v.c, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, agentWait)
	defer cancel()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	c, _, err := agent.Dial(ctx, dial, agent.DialOptions{})
	if err != nil {
		return nil, errorf(ErrConflict, "the VM %s's agent does not answer: %v", name, err)
	}
	v.c = c
	a.mu.Lock()
	if a.vms[name] == v { // not dropped meanwhile
		if a.ready == nil {
			a.ready = map[string]agentReady{}
		}
		a.ready[name] = agentReady{at: time.Now().UTC(), c: c}
	}
	a.mu.Unlock()
	return c, nil
}

// drop ends the VM's session (the VM stopped or is deleted).
func (a *vmAgents) drop(name string) {
	a.mu.Lock()
	v := a.vms[name]
	delete(a.vms, name)
	delete(a.ready, name)
	a.mu.Unlock()
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.c != nil {
		_ = v.c.Close()
		v.c = nil
	}
}

// Exec runs an exec in a VM through its agent, with the options the
// container path gives runc, and returns its exit code (128+N for a
// signal, as runc reports it).
func (a *vmAgents) Exec(ctx context.Context, name, socket string, o runtime.ExecOptions) (int, error) {
	c, err := a.client(ctx, name, socket)
	if err != nil {
		return -1, err
	}
	st, err := c.Exec(ctx, agent.ExecOptions{
		Args: o.Args, Env: o.Env, Cwd: o.Cwd,
		TTY: o.TTY, Width: o.Width, Height: o.Height,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
		Resize: agentSizes(ctx, o.Resize),
	})
	if err != nil {
		return -1, fmt.Errorf("exec in VM %s: %w", name, err)
	}
	return st.Code, nil
}

// PushFile writes a file into a VM through its agent (atomically).
func (a *vmAgents) PushFile(ctx context.Context, name, socket, path string, r io.Reader, o agent.FileOptions) error {
	c, err := a.client(ctx, name, socket)
	if err != nil {
		return err
	}
	if err := c.PushFile(ctx, path, r, o); err != nil {
		if errors.Is(err, agent.ErrAgent) {
			return errorf(ErrInvalid, "push %s into VM %s: %v", path, name, err)
		}
		return fmt.Errorf("push %s into VM %s: %w", path, name, err)
	}
	return nil
}

// vmAgentSocket is the VM's agent channel: the unix socket of QEMU's
// virtio-serial chardev in its run directory.
func (d *Daemon) vmAgentSocket(name string) string {
	return qemu.Config{RunDir: d.cfg.vmRunDir(name)}.AgentSocket()
}

// agentSizes forwards runtime's terminal sizes as the agent's.
func agentSizes(ctx context.Context, in <-chan runtime.WinSize) <-chan agent.WinSize {
	return relayConverted(ctx, in, func(s runtime.WinSize) agent.WinSize {
		return agent.WinSize{Width: s.Width, Height: s.Height}
	})
}
