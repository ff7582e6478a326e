package daemon

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
)

// killGrace bounds the wait for a killed container's init to be reaped.
const killGrace = 20 * time.Second

// ChangeState validates a start/stop/restart request and runs it as an
// operation.
func (d *Daemon) ChangeState(ctx context.Context, name string, req api.InstanceStatePut) (*operations.Operation, error) {
	if _, err := d.getRecord(name); err != nil {
		return nil, err
	}
	if req.Timeout < 0 {
		return nil, errorf(ErrInvalid, "negative timeout")
	}
	timeout := d.cfg.StopTimeout
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout) * time.Second
	}
	running := d.liveOf(name) != nil
	var fn operations.Func
	switch req.Action {
	case api.ActionStart:
		if running {
			return nil, errorf(ErrConflict, "instance %q is already running", name)
		}
		fn = func(ctx context.Context, _ *operations.Operation) error {
			return d.withInstance(ctx, name, api.StatusStarting, func() error { return d.startLocked(ctx, name) })
		}
	case api.ActionStop:
		if !running {
			return nil, errorf(ErrConflict, "instance %q is not running", name)
		}
		fn = func(ctx context.Context, _ *operations.Operation) error {
			return d.withInstance(ctx, name, api.StatusStopping, func() error { return d.stopLocked(ctx, name, req.Force, timeout) })
		}
	case api.ActionRestart:
		if !running {
			return nil, errorf(ErrConflict, "instance %q is not running", name)
		}
		fn = func(ctx context.Context, _ *operations.Operation) error {
			return d.withInstance(ctx, name, api.StatusStopping, func() error {
				if err := d.stopLocked(ctx, name, req.Force, timeout); err != nil {
					return err
				}
				return d.startLocked(ctx, name)
			})
		}
	default:
		return nil, errorf(ErrInvalid, "unknown action %q (want start, stop or restart)", req.Action)
	}
	desc := map[string]string{api.ActionStart: "Starting instance", api.ActionStop: "Stopping instance", api.ActionRestart: "Restarting instance"}[req.Action]
	return d.ops.Start(d.ctx, desc, instanceResources(name), fn), nil
}

// withInstance runs fn holding the instance's lock, showing status as its
// busy status meanwhile.
func (d *Daemon) withInstance(ctx context.Context, name, status string, fn func() error) error {
	unlock, err := d.lockInstance(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	defer d.setBusy(name, status)()
	return fn()
}

// stopLocked stops a running instance and releases what it held; the
// caller holds its lock. A graceful stop sends the image's shutdown signal
// to init and kills the container if it has not exited after timeout.
func (d *Daemon) stopLocked(ctx context.Context, name string, force bool, timeout time.Duration) error {
	inst, err := d.getRecord(name)
	if err != nil {
		return err
	}
	run := d.liveOf(name)
	if run == nil {
		return errorf(ErrConflict, "instance %q is not running", name)
	}
	if !force {
		sig := stopSignal(inst.StopSignal)
		if err := d.rt.Signal(ctx, name, sig); err != nil {
			d.log.Warn("stop signal failed, killing", "name", name, "err", err)
		} else {
			select {
			case <-run.exited:
			case <-time.After(timeout):
				d.log.Info("graceful stop timed out, killing", "name", name, "timeout", timeout)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-run.exited:
	default:
		if err := d.rt.Kill(ctx, name); err != nil {
			return fmt.Errorf("kill %s: %w", name, err)
		}
		select {
		case <-run.exited:
		case <-time.After(killGrace):
			return fmt.Errorf("instance %q did not exit after SIGKILL", name)
		}
	}
	return d.cleanupStopped(context.WithoutCancel(ctx), name, run, false)
}

// stopSignal parses a signal name such as "SIGUSR2" or "SIGRTMIN+3";
// unknown names fall back to SIGTERM.
func stopSignal(name string) syscall.Signal {
	if name == "" {
		return unix.SIGTERM
	}
	if s := unix.SignalNum(name); s != 0 {
		return s
	}
	var n int
	if _, err := fmt.Sscanf(name, "SIGRTMIN+%d", &n); err == nil {
		return syscall.Signal(34 + n) // glibc's SIGRTMIN is 34 on Linux
	}
	return unix.SIGTERM
}
