package daemon

import (
	"context"
	"sort"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
)

// Exec runs a command in a running instance and returns its exit code.
func (d *Daemon) Exec(ctx context.Context, name string, req api.ExecPost, stdio api.ExecIO) (int, error) {
	inst, err := d.instance(name)
	if err != nil {
		return -1, err
	}
	if len(req.Command) == 0 {
		return -1, errorf(ErrInvalid, "no command given")
	}
	if err := actExec.allowed(inst, false); err != nil {
		return -1, err
	}
	env := append([]string{}, inst.record().Env...)
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+req.Env[k])
	}
	if req.Interactive {
		env = append(env, "TERM=xterm")
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/root"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := runtime.ExecOptions{
		Args:   req.Command,
		Env:    env,
		Cwd:    cwd,
		TTY:    req.Interactive,
		Width:  req.Width,
		Height: req.Height,
		Stdin:  stdio.Stdin,
		Stdout: stdio.Stdout,
		Stderr: stdio.Stderr,
		Resize: winSizes(ctx, stdio.Resize),
	}
	if isVM(inst) {
		return d.agents.Exec(ctx, name, d.vmAgentSocket(name), opts)
	}
	return d.rt.Exec(ctx, name, opts)
}

// relayConverted forwards what in carries, converted by conv, until ctx
// ends or in is closed; then it closes its channel. A nil in gives nil
// (no terminal, no size changes).
func relayConverted[A, B any](ctx context.Context, in <-chan A, conv func(A) B) <-chan B {
	if in == nil {
		return nil
	}
	out := make(chan B)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case v, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- conv(v):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// winSizes forwards an exec's terminal size changes as runtime's type.
func winSizes(ctx context.Context, in <-chan api.WindowSize) <-chan runtime.WinSize {
	return relayConverted(ctx, in, func(s api.WindowSize) runtime.WinSize {
		return runtime.WinSize{Width: s.Width, Height: s.Height}
	})
}
