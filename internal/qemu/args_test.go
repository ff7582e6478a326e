package qemu

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{
		Name: "vm1", Accel: AccelTCG, CPUs: 2, MemoryMiB: 512,
		Kernel: "/k/vmlinuz", Initrd: "/k/initrd", Cmdline: "console=ttyS0 root=/dev/vda",
		Disk:   Disk{Path: "/pool/vm1/disk.img", Direct: true, AIO: "io_uring"},
		Net:    &Net{Tap: "vslabcd", MAC: "0a:58:0a:57:00:05"},
		RunDir: "/run/vessel/vm/vm1", ConsoleLog: "/var/log/vm1/console.log", Paused: true,
	}
}

// value returns the argument after the n-th occurrence of flag.
func values(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

func TestArgsTCG(t *testing.T) {
	a, err := testConfig().Args()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][2]string{
		{"-accel", "tcg,tb-size=64"}, {"-cpu", "qemu64"}, {"-machine", "q35"}, {"-smp", "2"}, {"-m", "512"},
		{"-kernel", "/k/vmlinuz"}, {"-initrd", "/k/initrd"}, {"-append", "console=ttyS0 root=/dev/vda"},
		{"-pidfile", "/run/vessel/vm/vm1/qemu.pid"}, {"-name", "guest=vm1,debug-threads=on"},
		{"-qmp", "unix:/run/vessel/vm/vm1/qmp.sock,server=on,wait=off"}, {"-serial", "chardev:console"},
	} {
		if !slices.Contains(values(a, want[0]), want[1]) {
			t.Errorf("no %s %s in %q", want[0], want[1], a)
		}
	}
	for _, flag := range []string{"-daemonize", "-S", "-nodefaults"} {
		if !slices.Contains(a, flag) {
			t.Errorf("no %s", flag)
		}
	}
	// A guest's reboot is a reset QEMU survives; a panic ends it.
	if slices.Contains(a, "-no-reboot") || !slices.Contains(values(a, "-action"), "reboot=reset,shutdown=poweroff,panic=shutdown") ||
		!slices.Contains(values(a, "-device"), "pvpanic") {
		t.Errorf("reboot and panic actions: %q", a)
	}
	if !slices.Contains(values(a, "-mon"), "chardev=events,mode=control") ||
		!strings.Contains(strings.Join(values(a, "-chardev"), " "), "socket,id=events,path=/run/vessel/vm/vm1/events.sock,server=on,wait=off") {
		t.Errorf("no events monitor: %q", a)
	}
	drive := values(a, "-drive")
	if len(drive) != 1 || !strings.Contains(drive[0], "file=/pool/vm1/disk.img,") || !strings.Contains(drive[0], "format=raw") ||
		!strings.Contains(drive[0], "aio=io_uring") || !strings.Contains(drive[0], "cache.direct=on") {
		t.Errorf("drive %q", drive)
	}
	devs := strings.Join(values(a, "-device"), " ")
	for _, d := range []string{"virtio-blk-pci,drive=root,id=root-disk", "virtio-net-pci,netdev=net0,mac=0a:58:0a:57:00:05",
		"virtserialport,chardev=agent,name=org.vesselhost.agent"} {
		if !strings.Contains(devs, d) {
			t.Errorf("no device %s in %s", d, devs)
		}
	}
	if strings.Contains(devs, "vhost-vsock") {
		t.Errorf("vsock without a CID: %s", devs)
	}
	chardevs := strings.Join(values(a, "-chardev"), " ")
	if !strings.Contains(chardevs, "path=/run/vessel/vm/vm1/console.sock,server=on,wait=off,logfile=/var/log/vm1/console.log,logappend=on") {
		t.Errorf("console chardev: %s", chardevs)
	}
	if nd := values(a, "-netdev"); len(nd) != 1 || !strings.HasPrefix(nd[0], "tap,id=net0,ifname=vslabcd,script=no,downscript=no") {
		t.Errorf("netdev %q", nd)
	}
}

func TestArgsKVMVsock(t *testing.T) {
	c := testConfig()
	c.Accel, c.VsockCID, c.Paused, c.Net, c.Disk = AccelKVM, 7, false, nil, Disk{Path: "/d.img", AIO: "threads"}
	a, err := c.Args()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(values(a, "-accel"), "kvm") || !slices.Contains(values(a, "-cpu"), "host") {
		t.Errorf("kvm: %q", a)
	}
	devs := strings.Join(values(a, "-device"), " ")
	if !strings.Contains(devs, "vhost-vsock-pci,guest-cid=7") || strings.Contains(devs, "virtserialport") || strings.Contains(devs, "virtio-net") {
		t.Errorf("devices %s", devs)
	}
	if slices.Contains(a, "-S") || len(values(a, "-netdev")) != 0 {
		t.Errorf("paused or net: %q", a)
	}
	if d := values(a, "-drive")[0]; strings.Contains(d, "cache.direct") || !strings.Contains(d, "aio=threads") {
		t.Errorf("drive %s", d)
	}
}

func TestArgsInvalid(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no name":         func(c *Config) { c.Name = "" },
		"comma in name":   func(c *Config) { c.Name = "a,b" },
		"no accel":        func(c *Config) { c.Accel = "" },
		"no cpus":         func(c *Config) { c.CPUs = 0 },
		"tiny memory":     func(c *Config) { c.MemoryMiB = 16 },
		"no kernel":       func(c *Config) { c.Kernel = "" },
		"comma in path":   func(c *Config) { c.Disk.Path = "/a,b.img" },
		"native buffered": func(c *Config) { c.Disk = Disk{Path: "/d", AIO: "native"} },
		"bad aio":         func(c *Config) { c.Disk.AIO = "posix" },
	} {
		c := testConfig()
		mut(&c)
		if _, err := c.Args(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
}

func TestIsQEMUOf(t *testing.T) {
	cl := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	good := cl("/usr/bin/qemu-system-x86_64", "-name", "guest=vm1,debug-threads=on", "-pidfile", "/run/v/vm1/qemu.pid")
	if !isQEMUOf(good, "/run/v/vm1", "vm1") {
		t.Error("own qemu not recognised")
	}
	for name, b := range map[string][]byte{
		"other name":    cl("qemu-system-x86_64", "-name", "guest=vm10", "-pidfile", "/run/v/vm1/qemu.pid"),
		"other pidfile": cl("qemu-system-x86_64", "-name", "guest=vm1", "-pidfile", "/run/v/vm2/qemu.pid"),
		"not qemu":      cl("/bin/sleep", "-name", "guest=vm1", "-pidfile", "/run/v/vm1/qemu.pid"),
		"zombie":        nil,
	} {
		if isQEMUOf(b, "/run/v/vm1", "vm1") {
			t.Errorf("%s recognised as vm1's qemu", name)
		}
	}
}

// TestArgsIncoming: a QEMU that waits for its state (a stateful restore).
func TestArgsIncoming(t *testing.T) {
	c := testConfig()
	c.Incoming = true
	a, err := c.Args()
	if err != nil {
		t.Fatal(err)
	}
	if got := values(a, "-incoming"); !slices.Equal(got, []string{"defer"}) {
		t.Errorf("-incoming %v", got)
	}
	if a, _ := testConfig().Args(); slices.Contains(a, "-incoming") {
		t.Error("-incoming without Incoming")
	}
}

// TestArgsMicroVM: microvm gets virtio-mmio devices, ACPI (the guest finds
// them and its power button through it) and no pvpanic; an unknown
// machine is refused.
func TestArgsMicroVM(t *testing.T) {
	c := testConfig()
	c.Machine = MachineMicroVM
	a, err := c.Args()
	if err != nil {
		t.Fatal(err)
	}
	if m := values(a, "-machine"); len(m) != 1 || !strings.HasPrefix(m[0], "microvm,acpi=on,") {
		t.Errorf("machine %q", m)
	}
	devs := strings.Join(values(a, "-device"), " ")
	for _, d := range []string{"virtio-blk-device,drive=root,id=root-disk", "virtio-net-device,netdev=net0,", "virtio-serial-device,id=vser0", "virtio-rng-device"} {
		if !strings.Contains(devs, d) {
			t.Errorf("no device %s in %s", d, devs)
		}
	}
	if strings.Contains(devs, "-pci") || strings.Contains(devs, "pvpanic") {
		t.Errorf("PCI or pvpanic devices on microvm: %s", devs)
	}
	c.Machine = "pc"
	if _, err := c.Args(); !errors.Is(err, ErrConfig) {
		t.Errorf("machine pc: %v", err)
	}
}

// TestCommandNoTHP: NoTHP runs QEMU through the launcher.
func TestCommandNoTHP(t *testing.T) {
	bin, args, err := Config{}.command([]string{"-S"})
	if err != nil || bin != Binary || !slices.Equal(args, []string{"-S"}) {
		t.Errorf("plain: %s %q %v", bin, args, err)
	}
	bin, args, err = Config{NoTHP: true, Launcher: "/usr/bin/vesseld"}.command([]string{"-S"})
	if err != nil || bin != "/usr/bin/vesseld" || !slices.Equal(args, []string{NoTHPArg, Binary, "-S"}) {
		t.Errorf("no THP: %s %q %v", bin, args, err)
	}
}

// TestArgsRAMFile: RAMFile backs the guest's RAM with a shared file
// under the machine's own RAM block name (a state saved from anonymous
// RAM loads into it).
func TestArgsRAMFile(t *testing.T) {
	c := testConfig()
	c.RAMFile = "/run/vessel/vm-ram/vm1.ram"
	a, err := c.Args()
	if err != nil {
		t.Fatal(err)
	}
	if m := values(a, "-machine"); len(m) != 1 || m[0] != "q35,memory-backend=pc.ram" {
		t.Errorf("machine %q", m)
	}
	if o := values(a, "-object"); !slices.Equal(o, []string{"memory-backend-file,id=pc.ram,size=512M,mem-path=/run/vessel/vm-ram/vm1.ram,share=on,align=2M"}) {
		t.Errorf("objects %q", o)
	}
	c.Machine = MachineMicroVM
	if a, _ = c.Args(); !strings.HasSuffix(values(a, "-machine")[0], ",memory-backend=microvm.ram") {
		t.Errorf("microvm: %q", values(a, "-machine"))
	}
	c.RAMFile = "/run/a,b.ram"
	if _, err := c.Args(); !errors.Is(err, ErrConfig) {
		t.Errorf("comma in the ram file: %v", err)
	}
	if a, _ := testConfig().Args(); len(values(a, "-object")) != 0 {
		t.Errorf("anonymous ram got objects %q", values(a, "-object"))
	}
}
