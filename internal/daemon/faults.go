package daemon

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Fault injection for tests: vesseld --fault POINT=ACTION makes the daemon
// fail on purpose at POINT, so tests can show that a migration cut or
// refused at any step loses nothing.
//
// Points:
//
//	migrate.target.recv-disk       the target receives a disk transfer
//	migrate.target.before-restore  the target is told to start the container
//	migrate.target.restore         the target restores the container
//	migrate.target.early-root      a live move's target readies the restore's root before "start" ("fail": the restore readies it itself)
//	migrate.target.recv-pages      the first memory page file of a copy-mode dump arrives
//	migrate.target.recv-memory-pass the second pre-copy memory pass arrives (the source runs the third)
//	migrate.source.precopy-verdict --memory=auto's trial of pre-copy ("fail": dropped for post-copy)
//	migrate.source.frozen          the source has checkpointed the container
//	migrate.source.started         the source has told the target to start it
//	migrate.target.reserved        the target has reserved the name (record and journal)
//	migrate.vm.source.disk-mirror  a VM's disk mirror has started (source)
//	migrate.vm.target.incoming     a VM's migration stream (RAM) arrives at the target
//	migrate.vm.target.claim        a VM's target points its bridge at the tap ("fail" only: it does not, a warning; the A/B of bench/migrate -vm-faults)
//	migrate.vm.source.watch        a VM's source watches QEMU's MIGRATION events ("fail" only: it polls only, as before; the A/B of bench/migrate -vm-faults)
//	instance.start.launched        a start or restore has made the processes, not yet recorded them
//	instance.create.volume         a create has made the volume, not yet recorded it complete
//	instance.copy.snapshot         a local copy has cloned a snapshot's volumes, not yet recorded it ("fail" too)
//	snapshot.restore.deleted       a snapshot restore has deleted the old disk, not yet cloned the new
//	snapshot.vm.saved              a VM's stateful snapshot has saved its state and disk, the VM is still stopped ("fail" too)
//
// Actions: "cut" closes the migration connection abruptly (a vanished
// peer), "fail" reports an error to the peer, "crash" kills the daemon
// (SIGKILL, so nothing of it runs on the way out), "hang" (restore only)
// makes the restore never return, as a stuck CRIU would. The points
// outside migrate.target.* take "crash" only: each is a window between
// two steps of an action that a restarted daemon must settle.
const (
	faultRecvDisk        = "migrate.target.recv-disk"
	faultBeforeRestore   = "migrate.target.before-restore"
	faultRestore         = "migrate.target.restore"
	faultEarlyRoot       = "migrate.target.early-root"
	faultRecvPages       = "migrate.target.recv-pages"
	faultRecvMemoryPass  = "migrate.target.recv-memory-pass"
	faultPrecopyVerdict  = "migrate.source.precopy-verdict"
	faultSourceFrozen    = "migrate.source.frozen"
	faultSourceStarted   = "migrate.source.started"
	faultTargetReserved  = "migrate.target.reserved"
	faultStartLaunched   = "instance.start.launched"
	faultCreateVolume    = "instance.create.volume"
	faultCopySnapshot    = "instance.copy.snapshot"
	faultRollbackDeleted = "snapshot.restore.deleted"
)

// ParseFaults turns POINT=ACTION strings into Config.Faults.
func ParseFaults(specs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range specs {
		p, a, ok := strings.Cut(s, "=")
		if !ok || (a != "cut" && a != "fail" && a != "crash" && a != "hang") {
			return nil, errorf(ErrInvalid, "bad fault %q (want POINT=cut|fail|crash|hang)", s)
		}
		out[p] = a
	}
	return out, nil
}

// fault returns the action injected at point ("" for none) and logs it.
func (d *Daemon) fault(point string) string {
	a := d.cfg.Faults[point]
	if a != "" {
		d.log.Warn("injecting fault", "point", point, "action", a)
	}
	return a
}

// crashAt kills the daemon at point if a "crash" fault is injected there.
// It waits a moment first, so that messages already sent leave the host.
func (d *Daemon) crashAt(point string) {
	if d.fault(point) != "crash" {
		return
	}
	time.Sleep(200 * time.Millisecond)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// injected is the error of a "fail" fault.
func injected(point string) error { return fmt.Errorf("injected fault at %s", point) }
