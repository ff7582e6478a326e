package daemon

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
)

// MaxStopTimeout bounds a graceful stop's timeout a client may ask for.
const MaxStopTimeout = 24 * time.Hour

// killGrace bounds the wait for a killed container's init to be reaped.
const killGrace = 20 * time.Second

// ChangeState validates a start/stop/restart request and runs it as an
// operation.
func (d *Daemon) ChangeState(ctx context.Context, name string, req api.InstanceStatePut) (*operations.Operation, error) {
	if _, err := d.instance(name); err != nil {
		return nil, err
	}
	timeout, err := secondsDuration("stop timeout", req.Timeout, MaxStopTimeout)
	if err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = d.cfg.StopTimeout
	}
	var act action
	var work func(ctx context.Context, inst *instance) error
	switch req.Action {
	case api.ActionStart:
		act, work = actStart, d.startLocked
	case api.ActionStop:
		act = actStop
		work = func(ctx context.Context, inst *instance) error { return d.stopLocked(ctx, inst, req.Force, timeout) }
	case api.ActionRestart:
		act = actRestart
		work = func(ctx context.Context, inst *instance) error {
			if err := d.stopLocked(ctx, inst, req.Force, timeout); err != nil {
				return err
			}
			return d.startLocked(ctx, inst)
		}
	default:
		return nil, errorf(ErrInvalid, "unknown action %q (want start, stop or restart)", req.Action)
	}
	if _, err := d.checkNow(name, act, false); err != nil {
		return nil, err
	}
	desc := map[string]string{api.ActionStart: "Starting instance", api.ActionStop: "Stopping instance", api.ActionRestart: "Restarting instance"}[req.Action]
	return d.ops.Start(d.ctx, desc, instanceResources(name), func(ctx context.Context, _ *operations.Operation) error {
		inst, release, err := d.lock(ctx, name, act, false)
		if err != nil {
			return err
		}
		defer release()
		return work(ctx, inst)
	}), nil
}

// stopLocked stops a running instance and releases what it held; the
// caller holds its lock. A graceful stop sends the image's shutdown signal
// to init and kills the container if it has not exited after timeout.
func (d *Daemon) stopLocked(ctx context.Context, inst *instance, force bool, timeout time.Duration) error {
	return d.stopLockedWith(ctx, inst, force, timeout, false)
}

// stopLockedWith is stopLocked; keepVMRAM (a stateful restore's stop of
// a VM) keeps the VM's RAM file and its cgroup for the next QEMU
// (vm_ram.go).
func (d *Daemon) stopLockedWith(ctx context.Context, inst *instance, force bool, timeout time.Duration, keepVMRAM bool) error {
	name := inst.name
	run := inst.live()
	if run == nil {
		return errorf(ErrConflict, "instance %q is not running", name)
	}
	if !force && isVM(inst) {
		if err := d.powerdownVM(ctx, name, run, timeout); err != nil {
			return err
		}
	} else if !force {
		if err := d.rt.Signal(ctx, name, stopSignal(inst.record().StopSignal)); err != nil {
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
	if err := d.killAndWait(ctx, inst, run); err != nil {
		return err
	}
	return d.cleanupRun(context.WithoutCancel(ctx), inst, run, false, keepVMRAM)
}

// killAndWait kills an instance's processes and waits for init's exit.
func (d *Daemon) killAndWait(ctx context.Context, inst *instance, run *running) error {
	select {
	case <-run.exited:
		return nil
	default:
	}
	kill := d.rt.Kill
	if run.vm != nil {
		kill = func(ctx context.Context, _ string) error { return run.vm.Kill(ctx) }
	}
	if err := kill(ctx, inst.name); err != nil {
		return fmt.Errorf("kill %s: %w", inst.name, err)
	}
	select {
	case <-run.exited:
		return nil
	case <-time.After(killGrace):
		return fmt.Errorf("instance %q did not exit after SIGKILL", inst.name)
	}
}

// cleanupStopped releases what a run held once init has exited (the
// runtime's state, the netns and veth, the cgroup) and commits the
// stopped state with the exit. keepRunning leaves the state running (a
// restart follows at once). run may be nil (nothing was watched).
func (d *Daemon) cleanupStopped(ctx context.Context, inst *instance, run *running, keepRunning bool) error {
	return d.cleanupRun(ctx, inst, run, keepRunning, false)
}

// cleanupRun is cleanupStopped; keepVMRAM leaves a VM's RAM file and
// cgroup (stopLockedWith).
func (d *Daemon) cleanupRun(ctx context.Context, inst *instance, run *running, keepRunning, keepVMRAM bool) error {
	name := inst.name
	var errs []error
	release := d.rt.Delete
	if isVM(inst) {
		release = func(context.Context, string) error { return d.releaseVMRun(name, keepVMRAM) }
	}
	if err := release(ctx, name); err != nil {
		errs = append(errs, err)
	}
	if err := d.releaseUserns(name); err != nil {
		errs = append(errs, err)
	}
	if err := d.net.Detach(ctx, name); err != nil {
		errs = append(errs, err)
	}
	if cg, err := d.instanceCgroup(name); err == nil && !keepVMRAM {
		if err := cg.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	inst.clearLive(run)
	next := state.StateStopped
	if keepRunning {
		next = state.StateRunning
	}
	err := d.setState(inst, next, func(_ *state.Tx, rec *state.Instance) error {
		if run != nil {
			rec.LastExit = &state.Exit{Status: run.exit.Status, Signal: run.exit.Signal, Time: run.exit.Time}
		}
		return nil
	})
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// onExit handles an exit nobody asked for (crash, poweroff or reboot from
// inside). Exits caused by an action (stop, a move's commit) are cleaned
// up by that action, which forgets the run first; then this does nothing.
func (d *Daemon) onExit(inst *instance, run *running) {
	release, err := d.lockInstance(d.ctx, inst, "")
	if err != nil {
		return // shutting down (the next start reconciles) or deleted
	}
	defer release()
	if inst.live() != run || !d.enterBackground() {
		return // handled by an action, or shutting down: reconcile will
	}
	defer d.bg.Done()
	name := inst.name
	d.log.Info("container exited", "name", name, "status", run.exit.Status, "signal", run.exit.Signal)
	ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
	defer cancel()
	if err := d.cleanupStopped(ctx, inst, run, false); err != nil {
		d.log.Error("cleanup after exit", "name", name, "err", err)
	}
	// In a child pid namespace, reboot(2) ends init with SIGHUP (restart) and
	// SIGINT (power off / halt). A reboot from inside restarts the container.
	if run.exit.Signal == "SIGHUP" {
		d.log.Info("container rebooted itself, starting it again", "name", name)
		if err := d.startLocked(ctx, inst); err != nil {
			d.log.Error("restart after reboot", "name", name, "err", err)
		}
	}
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
