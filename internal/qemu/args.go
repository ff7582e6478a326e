package qemu

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Binary is QEMU's system emulator for x86-64 guests.
const Binary = "qemu-system-x86_64"

// AgentPortName is the virtio-serial port the guest agent opens when the
// host has no vhost-vsock.
const AgentPortName = "org.vesselhost.agent"

// TCGCacheMiB bounds TCG's translation cache (QEMU's default is 1 GiB on
// 64-bit hosts, which a VM's memory limit would have to carry).
const TCGCacheMiB = 64

// The files of a VM's run directory.
const (
	QMPSocketFile = "qmp.sock"
	// EventsSocketFile is a second QMP monitor, for the daemon to hold
	// for the VM's life and read its events (RESET, SHUTDOWN) from: a
	// monitor serves one client at a time, so the commands (QMPSocketFile)
	// keep their own.
	EventsSocketFile  = "events.sock"
	ConsoleSocketFile = "console.sock"
	AgentSocketFile   = "agent.sock"
	PidFile           = "qemu.pid"
	// StderrFile holds what QEMU wrote before it daemonized (its errors
	// at start).
	StderrFile = "qemu.stderr"
)

// Disk is the VM's root disk: a raw image file.
type Disk struct {
	Path string
	// Direct opens the file with O_DIRECT (cache=none): QEMU's I/O goes to
	// the pool's disk without the host's page cache, which a VM would only
	// double (it has its own).
	Direct bool
	// AIO is QEMU's I/O engine: "io_uring", "native" (Linux AIO, needs
	// Direct) or "threads".
	AIO string
}

// Net is the VM's network card: virtio-net on a tap the host made.
type Net struct {
	Tap string
	MAC string
}

// Machine types Config.Machine takes.
const (
	// MachineQ35 is a PC with PCI and ACPI (the default): every device
	// vessel uses, also vhost-vsock.
	MachineQ35 = "q35"
	// MachineMicroVM is QEMU's microvm: no PCI, no firmware beyond qboot,
	// virtio-mmio devices the guest finds through ACPI (acpi=on, with a
	// GED power button), an ISA serial port.
	MachineMicroVM = "microvm"
)

// Config describes one VM's QEMU process.
type Config struct {
	// Name is the instance's name (-name guest=NAME).
	Name  string
	Accel Accel
	// Machine is MachineQ35 (also when empty) or MachineMicroVM. A VM
	// keeps its machine type: a saved state or a migration needs the same
	// one on the other side.
	Machine string
	CPUs    int
	// MemoryMiB is the guest's RAM.
	MemoryMiB int
	// Kernel, Initrd and Cmdline are the direct kernel boot.
	Kernel  string
	Initrd  string
	Cmdline string
	Disk    Disk
	Net     *Net
	// RunDir holds the sockets and the pidfile (see the *File names).
	RunDir string
	// ConsoleLog receives everything the serial console prints.
	ConsoleLog string
	// VsockCID, when not 0, gives the guest a vhost-vsock device with this
	// CID for the agent; 0 uses the virtio-serial port AgentPortName on
	// the unix socket AgentSocketFile.
	VsockCID uint32
	// Paused starts QEMU with its CPUs stopped (-S): the caller moves it
	// into its cgroup and lets it run with Monitor.Cont.
	Paused bool
	// Incoming starts QEMU waiting for a migration stream (-incoming
	// defer: migrate-incoming names where, after the caller set up the
	// migration's capabilities and the disk's NBD export).
	Incoming bool
	// NoTHP starts QEMU with transparent huge pages off (thp.go): what a
	// QEMU that loads a state file wants where huge pages are slow to
	// fault in. Launcher is the vessel binary that runs it so (its main
	// hands IsNoTHPLaunch invocations to ExecNoTHP); empty means this
	// process's own executable.
	NoTHP    bool
	Launcher string
	// RAMFile, if set, backs the guest's RAM with this file, mapped shared
	// (memory-backend-file share=on, the machine's own RAM block name
	// as its id, so a state saved from anonymous RAM loads into it and
	// back): its pages outlive QEMU, for the next QEMU of the same VM to
	// map again (ram_file.go).
	RAMFile string
}

// RAMBlockName is the RAM block (and memory backend id) of the guest's
// RAM on the machine type: what a state file names it.
func (c Config) RAMBlockName() string {
	if c.Machine == MachineMicroVM {
		return "microvm.ram"
	}
	return "pc.ram"
}

// QMPSocket, ConsoleSocket, AgentSocket and PidPath are the VM's files in
// its run directory.
func (c Config) QMPSocket() string     { return filepath.Join(c.RunDir, QMPSocketFile) }
func (c Config) EventsSocket() string  { return filepath.Join(c.RunDir, EventsSocketFile) }
func (c Config) ConsoleSocket() string { return filepath.Join(c.RunDir, ConsoleSocketFile) }
func (c Config) AgentSocket() string   { return filepath.Join(c.RunDir, AgentSocketFile) }
func (c Config) PidPath() string       { return filepath.Join(c.RunDir, PidFile) }

// ErrConfig is a Config QEMU cannot run.
var ErrConfig = errors.New("invalid vm configuration")

func (c Config) validate() error {
	var bad []string
	if c.Name == "" || strings.ContainsAny(c.Name, ",= \x00") {
		bad = append(bad, fmt.Sprintf("name %q", c.Name))
	}
	if c.Machine != "" && c.Machine != MachineQ35 && c.Machine != MachineMicroVM {
		bad = append(bad, fmt.Sprintf("machine %q", c.Machine))
	}
	if c.Accel != AccelKVM && c.Accel != AccelTCG {
		bad = append(bad, fmt.Sprintf("accelerator %q", c.Accel))
	}
	if c.CPUs < 1 {
		bad = append(bad, fmt.Sprintf("%d cpus", c.CPUs))
	}
	if c.MemoryMiB < 64 {
		bad = append(bad, fmt.Sprintf("%d MiB of memory (64 at least)", c.MemoryMiB))
	}
	if c.Kernel == "" || c.Disk.Path == "" || c.RunDir == "" {
		bad = append(bad, "kernel, disk and run directory are needed")
	}
	switch c.Disk.AIO {
	case "io_uring", "threads":
	case "native":
		if !c.Disk.Direct {
			bad = append(bad, "aio=native needs direct I/O")
		}
	default:
		bad = append(bad, fmt.Sprintf("disk aio %q", c.Disk.AIO))
	}
	for _, p := range []string{c.Kernel, c.Initrd, c.Disk.Path, c.RunDir, c.ConsoleLog, c.RAMFile} {
		// QEMU's option syntax splits on commas.
		if strings.Contains(p, ",") {
			bad = append(bad, fmt.Sprintf("path %q contains a comma", p))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

// Args returns QEMU's command line (without the binary): no default
// devices, no display; the q35 machine (KVM: -cpu host; TCG: qemu64 and a
// bounded translation cache); direct kernel boot; the root disk on
// virtio-blk; virtio-net on the tap; the serial console on a unix socket
// (and logged); the agent channel; QMP on a unix socket; a pidfile, and
// a second QMP monitor for events; -daemonize: QEMU detaches (own session) once it is ready, and its
// parent's exit status says whether it started.
func (c Config) Args() ([]string, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	micro := c.Machine == MachineMicroVM
	// dev names a virtio device for the machine's bus.
	dev := func(name string) string {
		if micro {
			return name + "-device"
		}
		return name + "-pci"
	}
	machine := MachineQ35
	if micro {
		// ACPI describes the virtio-mmio devices to the guest (its kernel
		// has no virtio_mmio.device= parsing) and gives the GED power
		// button; the PIT and PIC stay (under TCG the guest calibrates its
		// clocks against the PIT: without it, and without HPET or ACPI PM
		// timer, it hangs at boot), an RTC.
		machine = "microvm,acpi=on,pit=on,pic=on,rtc=on,isa-serial=on"
	}
	if c.RAMFile != "" {
		machine += ",memory-backend=" + c.RAMBlockName()
	}
	a := []string{
		"-name", "guest=" + c.Name + ",debug-threads=on",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", machine,
	}
	if c.Accel == AccelKVM {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		a = append(a, "-accel", "tcg,tb-size="+strconv.Itoa(TCGCacheMiB), "-cpu", "qemu64")
	}
	a = append(a,
		"-smp", strconv.Itoa(c.CPUs),
		"-m", strconv.Itoa(c.MemoryMiB),
	)
	if c.RAMFile != "" {
		// align=2M: QEMU maps a file at its page size's alignment (4 KiB
		// on tmpfs) unless told, and a mapping off a 2 MiB boundary gets
		// no huge pages of a tmpfs with huge= set (vessel's RAM tmpfs).
		a = append(a, "-object", "memory-backend-file,id="+c.RAMBlockName()+",size="+strconv.Itoa(c.MemoryMiB)+"M,mem-path="+c.RAMFile+",share=on,align=2M")
	}
	a = append(a,
		// A guest's reboot resets the machine and QEMU goes on (the
		// daemon sees RESET on the events monitor); its poweroff ends
		// QEMU, and so does a panic the guest reports on the pvpanic
		// device (the daemon sees the exit, as for a container's init).
		"-action", "reboot=reset,shutdown=poweroff,panic=shutdown",
		"-kernel", c.Kernel,
	)
	if c.Initrd != "" {
		a = append(a, "-initrd", c.Initrd)
	}
	if c.Cmdline != "" {
		a = append(a, "-append", c.Cmdline)
	}
	drive := "file=" + c.Disk.Path + ",if=none,id=root,format=raw,discard=unmap,aio=" + c.Disk.AIO
	if c.Disk.Direct {
		drive += ",cache.direct=on"
	}
	a = append(a, "-drive", drive, "-device", dev("virtio-blk")+",drive=root,id=root-disk")
	if c.Net != nil {
		a = append(a,
			"-netdev", "tap,id=net0,ifname="+c.Net.Tap+",script=no,downscript=no,vhost=off",
			"-device", dev("virtio-net")+",netdev=net0,mac="+c.Net.MAC)
	}
	console := "socket,id=console,path=" + c.ConsoleSocket() + ",server=on,wait=off"
	if c.ConsoleLog != "" {
		console += ",logfile=" + c.ConsoleLog + ",logappend=on"
	}
	a = append(a, "-chardev", console, "-serial", "chardev:console")
	if c.VsockCID != 0 {
		a = append(a, "-device", dev("vhost-vsock")+",guest-cid="+strconv.FormatUint(uint64(c.VsockCID), 10))
	} else {
		a = append(a,
			"-chardev", "socket,id=agent,path="+c.AgentSocket()+",server=on,wait=off",
			"-device", dev("virtio-serial")+",id=vser0",
			"-device", "virtserialport,chardev=agent,name="+AgentPortName)
	}
	a = append(a, "-device", dev("virtio-rng"))
	if !micro {
		// microvm's ACPI tables describe no pvpanic device.
		a = append(a, "-device", "pvpanic")
	}
	a = append(a,
		"-qmp", "unix:"+c.QMPSocket()+",server=on,wait=off",
		"-chardev", "socket,id=events,path="+c.EventsSocket()+",server=on,wait=off",
		"-mon", "chardev=events,mode=control",
		"-pidfile", c.PidPath(),
		"-daemonize",
	)
	if c.Paused {
		a = append(a, "-S")
	}
	if c.Incoming {
		a = append(a, "-incoming", "defer")
	}
	return a, nil
}
