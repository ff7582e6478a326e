package vm

import (
	"fmt"
	"net/netip"
	"strings"
)

// Net is the guest's network configuration, given to its init on the
// kernel command line as
//
//	vessel.net=<ifname-or-mac>,<address/prefix>,<gateway>,<dns>
//
// (the interface is named by its MAC: the guest's names are its own; an
// empty gateway or dns is left out but keeps its comma).
type Net struct {
	MAC     string
	Address netip.Prefix
	Gateway netip.Addr
	DNS     netip.Addr
}

func (n Net) String() string {
	opt := func(a netip.Addr) string {
		if a.IsValid() {
			return a.String()
		}
		return ""
	}
	return fmt.Sprintf("%s,%s,%s,%s", n.MAC, n.Address, opt(n.Gateway), opt(n.DNS))
}

// Boot is what the guest's kernel command line says.
type Boot struct {
	// Hostname is the instance's name (vessel.hostname=).
	Hostname string
	// Init is the image's init (vessel.init=), when it is one word and not
	// /sbin/init, the guest init's default.
	Init []string
	// StopSignal is the image's stop signal (vessel.stopsignal=): the
	// guest's init may send it to the image's init when the ACPI power
	// button is pressed (images without an ACPI daemon, busybox's).
	StopSignal string
	Net        *Net
	// NewMachineID asks the guest's init to empty the root's machine ID
	// before the image's init runs (vessel.newid=1): a copy's first boot.
	NewMachineID bool
}

// Cmdline returns the kernel command line: the serial console, the root
// disk (/dev/vda, ext4, read-write), a panic that does not wait (the
// pvpanic device has told QEMU, which ends: see qemu.Config.Args), and
// vessel's keys for the guest's init.
func Cmdline(b Boot) string {
	args := []string{"console=ttyS0", "root=/dev/vda", "rootfstype=ext4", "rw", "panic=-1"}
	if b.Hostname != "" {
		args = append(args, "vessel.hostname="+b.Hostname)
	}
	if len(b.Init) == 1 && b.Init[0] != "/sbin/init" && !strings.ContainsAny(b.Init[0], " \t\n\"") {
		args = append(args, "vessel.init="+b.Init[0])
	}
	if b.StopSignal != "" && !strings.ContainsAny(b.StopSignal, " \t\n\"") {
		args = append(args, "vessel.stopsignal="+b.StopSignal)
	}
	if b.Net != nil {
		args = append(args, "vessel.net="+b.Net.String())
	}
	if b.NewMachineID {
		args = append(args, "vessel.newid=1")
	}
	return strings.Join(args, " ")
}
