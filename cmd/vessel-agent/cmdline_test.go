package main

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCmdline(t *testing.T) {
	c, err := parseCmdline("console=ttyS0 root=/dev/vda rw quiet vessel.init=/bin/init " +
		"vessel.net=52:54:00:12:34:56,10.0.3.5/24,10.0.3.1,1.1.1.1 vessel.rescue=sleep vessel.hostname=vm1 vessel.stopsignal=SIGUSR2\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != "/dev/vda" || c.RootFSType != "ext4" || c.ReadOnly || c.Init != "/bin/init" || c.Rescue != "sleep" ||
		c.Hostname != "vm1" || c.StopSignal != unix.SIGUSR2 {
		t.Fatalf("config %+v", c)
	}
	n := c.Net
	if n == nil || n.MAC.String() != "52:54:00:12:34:56" || n.Name != "" || n.Addr.String() != "10.0.3.5/24" ||
		n.GW.String() != "10.0.3.1" || n.DNS.String() != "1.1.1.1" {
		t.Fatalf("net %+v", n)
	}
	c, err = parseCmdline("root=/dev/vdb ro vessel.net=eth0,fd00::5/64")
	if err != nil {
		t.Fatal(err)
	}
	if c.NewMachineID {
		t.Fatal("vessel.newid without the key")
	}
	if c2, err := parseCmdline("root=/dev/vda vessel.newid=1"); err != nil || !c2.NewMachineID {
		t.Fatalf("vessel.newid=1: %+v %v", c2, err)
	}
	if c2, err := parseCmdline("root=/dev/vda vessel.stopsignal=term"); err != nil || c2.StopSignal != unix.SIGTERM {
		t.Fatalf("stop signal %v %v", c2.StopSignal, err)
	}
	if !c.ReadOnly || c.Init != "/sbin/init" || c.Rescue != "poweroff" || c.Net.Name != "eth0" || c.Net.GW.IsValid() || c.Net.DNS.IsValid() {
		t.Fatalf("config %+v net %+v", c, c.Net)
	}
	for _, bad := range []string{
		"quiet",
		"root=UUID=1234",
		"root=/dev/vda vessel.init=sbin/init",
		"root=/dev/vda vessel.net=eth0",
		"root=/dev/vda vessel.net=eth0,10.0.3.5",
		"root=/dev/vda vessel.net=eth0,10.0.3.5/24,gateway",
		"root=/dev/vda vessel.net=a/b,10.0.3.5/24",
		"root=/dev/vda vessel.rescue=panic",
		"root=/dev/vda vessel.stopsignal=SIGNOPE",
		"root=/dev/vda vessel.hostname=a/b",
	} {
		if _, err := parseCmdline(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseLoadList(t *testing.T) {
	mods, err := parseLoadList(strings.NewReader(`# vessel.load
kernel/net/vmw_vsock/vsock.ko.xz

/lib/modules/extra/virtio_blk.ko  queue_depth=64 
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Path != "/lib/modules/kernel/net/vmw_vsock/vsock.ko.xz" || mods[0].Params != "" ||
		mods[1].Path != "/lib/modules/extra/virtio_blk.ko" || mods[1].Params != "queue_depth=64" {
		t.Fatalf("modules %+v", mods)
	}
}

// FuzzParseCmdline: any command line parses or fails, and a parsed one
// names a /dev root.
func FuzzParseCmdline(f *testing.F) {
	f.Add("root=/dev/vda rw vessel.net=eth0,10.0.0.2/24,10.0.0.1,10.0.0.1 vessel.init=/sbin/init")
	f.Add("root=/dev/vda vessel.net=52:54:00:00:00:01,fd00::2/64")
	f.Fuzz(func(t *testing.T, line string) {
		c, err := parseCmdline(line)
		if err == nil && !strings.HasPrefix(c.Root, "/dev/") {
			t.Fatalf("root %q", c.Root)
		}
	})
}
