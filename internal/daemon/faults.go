package daemon

import (
	"fmt"
	"strings"
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
//
// Actions: "cut" closes the migration connection abruptly (a vanished
// peer), "fail" reports an error to the peer.
const (
	faultRecvDisk      = "migrate.target.recv-disk"
	faultBeforeRestore = "migrate.target.before-restore"
	faultRestore       = "migrate.target.restore"
)

// ParseFaults turns POINT=ACTION strings into Config.Faults.
func ParseFaults(specs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range specs {
		p, a, ok := strings.Cut(s, "=")
		if !ok || (a != "cut" && a != "fail") {
			return nil, errorf(ErrInvalid, "bad fault %q (want POINT=cut|fail)", s)
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

// injected is the error of a "fail" fault.
func injected(point string) error { return fmt.Errorf("injected fault at %s", point) }
