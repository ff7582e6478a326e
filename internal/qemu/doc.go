// Package qemu runs QEMU virtual machines for vessel: it decides the
// accelerator the host offers (Detect: KVM where the CPU has vmx or svm,
// /dev/kvm opens, the module is not kvm_pvm and the host is not itself a
// TCG guest; TCG otherwise), builds
// QEMU's command line (Config.Args: direct kernel boot, a raw virtio-blk
// disk, virtio-net on a tap, the serial console and the agent channel on
// unix sockets, the QMP socket), starts QEMU detached from the daemon
// (Start: QEMU daemonizes itself, paused, and writes a pidfile) and finds it
// again after a daemon restart (Find), and speaks QMP to it (Connect, a
// Monitor over github.com/digitalocean/go-qemu/qmp).
//
// Vocabulary: the "run directory" of a VM holds its sockets and pidfile
// (qmp.sock, console.sock, agent.sock, qemu.pid); the VM's "name" is the
// instance's, passed to QEMU as -name guest=NAME so a process found by its
// pidfile is recognised as this VM's QEMU.
package qemu
