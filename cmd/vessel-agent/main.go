// Command vessel-agent is vessel's agent inside a virtual machine. It is
// the /init of the initramfs vessel boots a VM with:
//
//	vessel-agent init     PID 1: load modules, mount the root disk, set up
//	                      the network, start the agent daemon, switch root
//	                      to the image's init (the default as PID 1)
//	vessel-agent daemon   serve the host over the agent channel (started by
//	                      init; see package internal/agent)
//
// The kernel command line drives init: root= (the root disk, e.g.
// /dev/vda), rootfstype= (default ext4), ro, vessel.init= (default
// /sbin/init), vessel.net=<ifname-or-mac>,<cidr>,<gw>,<dns> (gw and dns
// may be empty), vessel.hostname=, vessel.newid=1 (empty the root's
// machine ID: a copy's first boot), vessel.stopsignal= (what the ACPI power
// button sends PID 1), vessel.rescue=shell|sleep|poweroff (what a failed
// boot does; default poweroff).
package main

import (
	"fmt"
	"os"
)

// version is set by the build (-X main.version=...).
var version = "dev"

func main() {
	cmd := ""
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	switch {
	case cmd == "init" || (cmd == "" && os.Getpid() == 1):
		runInit() // does not return
	case cmd == "daemon":
		os.Exit(runDaemon(os.Args[2:]))
	case cmd == "--version" || cmd == "version":
		fmt.Println("vessel-agent", version)
	default:
		fmt.Fprintln(os.Stderr, "usage: vessel-agent init | daemon [--ready-fd N] [--init PATH] | version")
		os.Exit(2)
	}
}
