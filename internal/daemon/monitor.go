package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// running is the live view of one running instance.
type running struct {
	proc   runtime.Process
	exited chan struct{} // closed when init has exited
	exit   runtime.Exit  // valid once exited is closed
}

// track registers a running instance and starts watching for its exit.
func (d *Daemon) track(name string, proc runtime.Process) (*running, error) {
	ch, err := d.rt.Watch(name)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", name, err)
	}
	run := &running{proc: proc, exited: make(chan struct{})}
	d.mu.Lock()
	d.live[name] = run
	d.mu.Unlock()
	go func() {
		run.exit = <-ch
		close(run.exited)
		d.onExit(name, run)
	}()
	return run, nil
}

// liveOf returns the running entry of an instance, or nil.
func (d *Daemon) liveOf(name string) *running {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[name]
}

// onExit handles an exit nobody asked for (crash, poweroff or reboot from
// inside). Exits caused by stop are cleaned up by stop itself, which removes
// the live entry first; then this does nothing.
func (d *Daemon) onExit(name string, run *running) {
	unlock, err := d.instLocks.Lock(d.ctx, name)
	if err != nil {
		return // daemon shutting down; reattach will see the exit
	}
	defer unlock()
	if d.liveOf(name) != run {
		return
	}
	d.log.Info("container exited", "name", name, "status", run.exit.Status, "signal", run.exit.Signal)
	ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
	defer cancel()
	if err := d.cleanupStopped(ctx, name, run, false); err != nil {
		d.log.Error("cleanup after exit", "name", name, "err", err)
	}
	// In a child pid namespace, reboot(2) ends init with SIGHUP (restart) and
	// SIGINT (power off / halt). A reboot from inside restarts the container.
	if run.exit.Signal == "SIGHUP" {
		d.log.Info("container rebooted itself, starting it again", "name", name)
		if err := d.startLocked(ctx, name); err != nil {
			d.log.Error("restart after reboot", "name", name, "err", err)
		}
	}
}

// cleanupStopped releases what a run held once init has exited: the runc
// container and shim state, the netns and veth, the cgroup. keepRunning
// leaves the record's Running flag set (a restart follows at once).
func (d *Daemon) cleanupStopped(ctx context.Context, name string, run *running, keepRunning bool) error {
	var errs []error
	if err := d.rt.Delete(ctx, name); err != nil {
		errs = append(errs, err)
	}
	if err := d.net.Detach(ctx, name); err != nil {
		errs = append(errs, err)
	}
	if cg, err := d.instanceCgroup(name); err == nil {
		if err := cg.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	d.mu.Lock()
	if d.live[name] == run {
		delete(d.live, name)
	}
	d.mu.Unlock()
	_, err := d.state.UpdateInstance(name, func(i *state.Instance) error {
		i.State = state.StateStopped
		if keepRunning {
			i.State = state.StateRunning
		}
		if run != nil {
			i.LastExit = &state.Exit{Status: run.exit.Status, Signal: run.exit.Signal, Time: run.exit.Time}
		}
		return nil
	})
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reattach rebuilds the live view after a daemon (re)start: instances that
// were running and still are get watched again; those that died while the
// daemon was away are cleaned up and shown as stopped.
func (d *Daemon) reattach(ctx context.Context) error {
	insts, err := d.state.ListInstances()
	if err != nil {
		return err
	}
	for _, inst := range insts {
		if !inst.Running() {
			// Leftovers of a crash between start steps: free them.
			_ = d.net.Detach(ctx, inst.Name)
			continue
		}
		status, pid, err := d.rt.State(ctx, inst.Name)
		// Paused: frozen by a snapshot or a move the daemon did not live
		// to finish; alive all the same.
		if err == nil && (status == runtime.StatusRunning || status == runtime.StatusPaused) {
			if _, err := d.track(inst.Name, runtime.Process{InitPid: pid}); err == nil {
				// A container frozen by an interrupted move may run on
				// its target by now: recoverMigrations decides.
				if j, ok := d.readJournal(inst.Name); !ok || j.Role != journalSource {
					d.thawLeftover(inst.Name)
				}
				d.log.Info("reattached running container", "name", inst.Name, "pid", pid)
				// Limits are in the kernel already; writing them again
				// repairs an update a crashed daemon left half-done.
				if err := d.applyLimits(ctx, inst.Name, inst.Config, 0); err != nil {
					d.log.Warn("re-apply limits", "name", inst.Name, "err", err)
				}
				continue
			}
		}
		// Gone while we were away: read its exit from the shim's record.
		run := &running{exited: make(chan struct{})}
		if ch, werr := d.rt.Watch(inst.Name); werr == nil {
			select {
			case run.exit = <-ch:
			case <-time.After(5 * time.Second):
			}
		}
		close(run.exited)
		d.log.Info("container stopped while the daemon was down", "name", inst.Name)
		if err := d.cleanupStopped(ctx, inst.Name, run, false); err != nil {
			d.log.Warn("cleanup of stopped container", "name", inst.Name, "err", err)
		}
	}
	return nil
}
