package daemon

import (
	"context"
	"io"
	"sort"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
)

// ExecIO is the plumbing of one exec: the client's streams and terminal
// size changes.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan runtime.WinSize
}

// Exec runs a command in a running instance and returns its exit code.
func (d *Daemon) Exec(ctx context.Context, name string, req api.ExecPost, stdio ExecIO) (int, error) {
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
	return d.rt.Exec(ctx, name, runtime.ExecOptions{
		Args:   req.Command,
		Env:    env,
		Cwd:    cwd,
		TTY:    req.Interactive,
		Width:  req.Width,
		Height: req.Height,
		Stdin:  stdio.Stdin,
		Stdout: stdio.Stdout,
		Stderr: stdio.Stderr,
		Resize: stdio.Resize,
	})
}
