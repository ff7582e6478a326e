package network

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// maxIfNameLen is the longest interface name the kernel accepts (IFNAMSIZ-1).
const maxIfNameLen = 15

// containerIfName is the container end's name inside its netns.
const containerIfName = "eth0"

// HostVethName returns the name of the host-side veth for a container on a
// bridge: "vsl" followed by 8 hex digits of a SHA-256 of bridge+"/"+container.
// It is deterministic, so a restarted daemon finds leftovers, and 11 bytes
// long, within the kernel's 15.
func HostVethName(bridge, container string) string {
	sum := sha256.Sum256([]byte(bridge + "/" + container))
	return "vsl" + hex.EncodeToString(sum[:4])
}

// MACFor returns the hardware address eth0 gets for addr: 0a:58 followed by
// the four IPv4 bytes (for an IPv6 address, its last four bytes). 0x0a has
// the locally-administered bit set and the multicast bit clear, so the
// address never clashes with a vendor's. Deriving the MAC from the address
// keeps neighbours' ARP caches valid when a container moves hosts. The zero
// Addr gives 0a:58:00:00:00:00.
func MACFor(addr netip.Addr) string {
	b := addr.Unmap().AsSlice()
	if len(b) < 4 {
		b = make([]byte, 4)
	}
	b = b[len(b)-4:]
	return net.HardwareAddr{0x0a, 0x58, b[0], b[1], b[2], b[3]}.String()
}

// validIfName mirrors the kernel's dev_valid_name.
func validIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty interface name")
	case len(name) > maxIfNameLen:
		return fmt.Errorf("interface name %q is longer than %d bytes", name, maxIfNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is reserved", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("interface name %q contains '/', ':' or white space", name)
	}
	return nil
}

// validContainerName reports whether name can be a file name in NetnsDir.
func validContainerName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}
