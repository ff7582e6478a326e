// vminit is a stand-in for `vessel-agent init` in vessel's VM tests only
// (built by the test; never shipped): the initramfs's /init. It loads the
// modules /lib/modules/vessel.load lists, mounts the root disk, configures
// the network from vessel.net=, writes /etc/hostname from vessel.hostname=,
// starts a watcher that turns the ACPI power
// button into the image's stop signal (vessel.stopsignal=) for PID 1, and
// switches to the disk's init.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "power-button" {
		powerButton(os.Args[2])
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "vminit: %v\n", err)
		// PID 1 must not exit: power off instead.
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}
}

func cmdline() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	out := map[string]string{}
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

func run() error {
	must := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := must("mount /proc", unix.Mount("proc", "/proc", "proc", 0, "")); err != nil {
		return err
	}
	if err := must("mount /sys", unix.Mount("sysfs", "/sys", "sysfs", 0, "")); err != nil {
		return err
	}
	if err := must("mount /dev", unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")); err != nil {
		return err
	}
	args := cmdline()
	if err := loadModules(); err != nil {
		return err
	}
	if h := args["vessel.hostname"]; h != "" {
		_ = unix.Sethostname([]byte(h))
	}
	if n := args["vessel.net"]; n != "" {
		if err := configureNet(n); err != nil {
			fmt.Fprintf(os.Stderr, "vminit: network: %v\n", err)
		}
	}
	if err := waitFor("/dev/vda"); err != nil {
		return err
	}
	if err := must("mount /dev/vda", unix.Mount("/dev/vda", "/mnt/root", "ext4", 0, "")); err != nil {
		return err
	}
	if h := args["vessel.hostname"]; h != "" {
		// The instance's identity, as vessel writes it into a container's
		// root (writeIdentity).
		_ = os.MkdirAll("/mnt/root/etc", 0o755)
		_ = os.Remove("/mnt/root/etc/hostname")
		_ = os.WriteFile("/mnt/root/etc/hostname", []byte(h+"\n"), 0o644)
	}
	if sig := args["vessel.stopsignal"]; sig != "" {
		if err := startWatcher(sig); err != nil {
			fmt.Fprintf(os.Stderr, "vminit: power button: %v\n", err)
		}
	}
	fmt.Println("vminit: switching to the root disk")
	for _, m := range []string{"dev", "proc", "sys"} {
		_ = os.MkdirAll("/mnt/root/"+m, 0o755)
		if err := must("move /"+m, unix.Mount("/"+m, "/mnt/root/"+m, "", unix.MS_MOVE, "")); err != nil {
			return err
		}
	}
	if err := must("chdir", unix.Chdir("/mnt/root")); err != nil {
		return err
	}
	if err := must("move root", unix.Mount(".", "/", "", unix.MS_MOVE, "")); err != nil {
		return err
	}
	if err := must("chroot", unix.Chroot(".")); err != nil {
		return err
	}
	_ = unix.Chdir("/")
	init := args["vessel.init"]
	if init == "" {
		init = "/sbin/init"
	}
	return syscall.Exec(init, []string{init}, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
}

func loadModules() error {
	f, err := os.Open("/lib/modules/vessel.load")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" {
			continue
		}
		m, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(m.Fd()), "", 0)
		m.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	return sc.Err()
}

func waitFor(p string) error {
	for range 300 {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no %s", p)
}

// configureNet applies vessel.net=MAC,ADDR/BITS,GATEWAY,DNS.
func configureNet(spec string) error {
	f := strings.Split(spec, ",")
	if len(f) < 3 {
		return fmt.Errorf("bad vessel.net %q", spec)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	var link netlink.Link
	for range 100 {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().HardwareAddr.String() == f[0] || l.Attrs().Name == f[0] {
				link = l
			}
		}
		if link != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if link == nil {
		return fmt.Errorf("no interface %s", f[0])
	}
	addr, err := netlink.ParseAddr(f[1])
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	if f[2] != "" {
		gw := net.ParseIP(f[2])
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw})
	}
	return nil
}

// startWatcher starts the power button watcher and waits until it has
// its input devices open (they go away from its view with /dev).
func startWatcher(sig string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("/init", "power-button", sig)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	buf := make([]byte, 1)
	_, err = r.Read(buf)
	r.Close()
	return err
}

// powerButton opens every input device, says so on fd 3, and on the
// first event sends sig to PID 1.
func powerButton(sig string) {
	s := unix.SignalNum(sig)
	if s == 0 {
		s = unix.SIGTERM
	}
	ev := make(chan struct{}, 1)
	ents, _ := os.ReadDir("/dev/input")
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "event") {
			continue
		}
		f, err := os.Open("/dev/input/" + e.Name())
		if err != nil {
			continue
		}
		go func() {
			b := make([]byte, 24)
			if n, _ := f.Read(b); n > 0 {
				ev <- struct{}{}
			}
		}()
	}
	ready := os.NewFile(3, "ready")
	_, _ = ready.Write([]byte{1})
	ready.Close()
	for range ev {
		fmt.Printf("vminit: power button: %s to init\n", sig)
		_ = unix.Kill(1, s)
	}
}
