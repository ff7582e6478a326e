package runtime

import (
	"fmt"
	"os"
	"strings"
)

// CheckDumpable refuses, before anything is frozen, a checkpoint CRIU
// could take but not restore: a container whose processes (pids, host pids
// as the container's cgroup lists them) do not all share the time
// namespace of its init (initPid). The error wraps ErrNotDumpable and
// names the processes. On a kernel without time namespaces everything is
// dumpable.
//
// CRIU restores a container in a time namespace of its own (its monotonic
// clocks go on from where they were). runc 1.1 does not join time
// namespaces, so a process `vessel exec` starts in a restored container
// keeps the host's, and CRIU cannot restore a task outside the root task's
// time namespace ("Can't restore sub-task in NS"): the target would fail
// after the freeze. Such a process must go first (or the move be cold).
func CheckDumpable(initPid int, pids []int) error {
	initNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/time", initPid))
	if err != nil {
		// No time namespaces on this kernel (or init is gone: CRIU will
		// say so): nothing to refuse.
		return nil //nolint:nilerr // see above
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
		return fmt.Errorf("%w: process %s was started with 'vessel exec' after the container was restored and keeps the host's clocks (runc 1.1 does not join the restored time namespace), which CRIU cannot restore; stop it first, or move the container cold",
			ErrNotDumpable, strings.Join(outside, ", "))
	}
	return nil
}
