// Package identity resets what makes a copied root filesystem the same
// machine as its source: the machine ID. vesseld applies it to a new
// container's root (a launch or a copy); vessel-agent, a VM copy's guest
// init, to the guest's root at its first boot.
package identity

import (
	"errors"
	"fmt"
	"os"
)

// ResetMachineID empties root's /etc/machine-id, so that systemd makes the
// machine an ID of its own at its next boot, as on a machine first booted
// (an empty file, not a missing one: systemd then commits the new ID to
// it), and removes D-Bus's copy (/var/lib/dbus/machine-id, when it is a
// file and not the usual link to /etc/machine-id). Two machines with one
// ID clash wherever it names them: DHCP's DUID, journald, systemd's
// network names. A root with no /etc/machine-id is left without one. A
// link in its place is replaced, not written through: every access stays
// inside root.
func ResetMachineID(root *os.Root) error {
	const id = "etc/machine-id"
	fi, err := root.Lstat(id)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("/%s: %w", id, err)
	case fi.Mode().IsRegular() && fi.Size() == 0:
	default:
		if err := root.Remove(id); err != nil {
			return fmt.Errorf("/%s: %w", id, err)
		}
		if err := root.WriteFile(id, nil, 0o444); err != nil {
			return fmt.Errorf("/%s: %w", id, err)
		}
	}
	const dbus = "var/lib/dbus/machine-id"
	if fi, err := root.Lstat(dbus); err == nil && fi.Mode().IsRegular() {
		if err := root.Remove(dbus); err != nil {
			return fmt.Errorf("/%s: %w", dbus, err)
		}
	}
	return nil
}
