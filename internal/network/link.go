package network

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// deleteLinkByName deletes a link if it exists.
func deleteLinkByName(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	// ENODEV: it went away since the lookup (deleting one end of a veth
	// pair deletes the other), which is what we wanted.
	if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// isLinkNotFound reports whether err is netlink's "no such link".
func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// linkExists reports whether a link of that name exists; a failed lookup
// counts as existing (the caller then keeps what belongs to it).
func linkExists(h *netlink.Handle, name string) bool {
	_, err := h.LinkByName(name)
	return !isLinkNotFound(err)
}
