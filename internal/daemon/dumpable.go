package daemon

import (
	"fmt"
	"os"
	"strings"
)

// checkDumpable refuses a checkpoint CRIU could not restore, before
// anything is frozen: a container whose processes do not all share init's
// time namespace.
//
// CRIU restores a container in a time namespace of its own (its monotonic
// clocks go on from where they were). runc 1.1 does not join time
// namespaces, so a process `vessel exec` starts in a restored container
// keeps the host's, and CRIU cannot restore a task outside the root task's
// time namespace ("Can't restore sub-task in NS"): the target would fail
// after the freeze. Such a process must go first (or the move be cold).
func (d *Daemon) checkDumpable(name string) error {
	inst, err := d.instance(name)
	if err != nil {
		return err
	}
	run := inst.live()
	if run == nil {
		return nil
	}
	initNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/time", run.proc.InitPid))
	if err != nil {
		return nil // no time namespaces on this kernel
	}
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return err
	}
	pids, err := cg.Pids()
	if err != nil {
		return err
	}
	var outside []string
	for _, pid := range pids {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/time", pid))
		if err != nil || ns == initNS {
			continue // gone meanwhile, or fine
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		outside = append(outside, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
	}
	if len(outside) > 0 {
		return errorf(ErrConflict, "instance %q cannot be checkpointed: process %s was started with 'vessel exec' after the container was restored and keeps the host's clocks (runc 1.1 does not join the restored time namespace), which CRIU cannot restore; stop it first, or move the container cold",
			name, strings.Join(outside, ", "))
	}
	return nil
}
