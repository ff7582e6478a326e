package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/testutil"
)

// The guest tests boot a real VM: Debian's cloud kernel (scripts/setup.sh
// unpacks it into the kernel directory), an initramfs with this command
// as /init, and a root disk made from vessel's busybox image. They run
// under TCG where the host has no hardware virtualization; the agent
// channel is the virtio-serial port (vsock needs the host's vhost-vsock).

// kernelDir is setup's guest kernel: vmlinuz, config, modules/.
func kernelDir(t *testing.T) string {
	dir := os.Getenv("VESSEL_VM_KERNEL_DIR")
	if dir == "" {
		dir = "/var/cache/vessel-setup/vm-kernel/current"
	}
	if _, err := os.Stat(filepath.Join(dir, "vmlinuz")); err != nil {
		t.Fatalf("no guest kernel (make setup unpacks it): %v", err)
	}
	return dir
}

const guestMAC = "52:54:00:a9:e1:07"

// guestModules are the modules the test guest loads, in order: the root
// disk's driver decompressed (as vessel's initramfs carries modules), the
// rest as the package ships them (the kernel decompresses them).
var guestModules = []struct {
	path       string
	decompress bool
}{
	{"kernel/drivers/block/virtio_blk.ko.xz", true},
	{"kernel/net/core/failover.ko.xz", false},
	{"kernel/drivers/net/net_failover.ko.xz", false},
	{"kernel/drivers/net/virtio_net.ko.xz", false},
	{"kernel/net/vmw_vsock/vsock.ko.xz", false},
	{"kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko.xz", false},
	{"kernel/net/vmw_vsock/vmw_vsock_virtio_transport.ko.xz", false},
	{"kernel/drivers/input/evdev.ko.xz", false},
	{"kernel/drivers/acpi/button.ko.xz", false},
}

func run(t *testing.T, dir string, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, stderr.String())
	}
	return out
}

// buildInitramfs builds the agent (static) and packs it as /init with the
// modules, vessel.load and /dev/console.
func buildInitramfs(t *testing.T, work, kdir string) string {
	stage := filepath.Join(work, "initramfs")
	for _, d := range []string{"dev", "lib/modules", "proc", "sys", "newroot"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(stage, "init"), "github.com/vesselhost/vessel/cmd/vessel-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build vessel-agent: %v: %s", err, out)
	}
	var load strings.Builder
	for _, m := range guestModules {
		src := filepath.Join(kdir, "modules", m.path)
		name := filepath.Base(m.path)
		var data []byte
		if m.decompress {
			data = run(t, "", nil, "xz", "-dc", src)
			name = strings.TrimSuffix(name, ".xz")
		} else {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			data = b
		}
		if err := os.WriteFile(filepath.Join(stage, "lib/modules", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		load.WriteString("/lib/modules/" + name + "\n")
	}
	if err := os.WriteFile(filepath.Join(stage, "lib/modules/vessel.load"), []byte(load.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(stage, "dev/console"), unix.S_IFCHR|0o600, int(unix.Mkdev(5, 1))); err != nil {
		t.Fatal(err)
	}
	var list []string
	err := filepath.Walk(stage, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(stage, p); rel != "." {
			list = append(list, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cpio := run(t, stage, []byte(strings.Join(list, "\n")+"\n"), "busybox", "cpio", "-o", "-H", "newc")
	initrd := filepath.Join(work, "initrd.cpio")
	if err := os.WriteFile(initrd, cpio, 0o644); err != nil {
		t.Fatal(err)
	}
	return initrd
}

// buildDisk makes the root disk: vessel's busybox image, unpacked, as a
// raw ext4 file.
func buildDisk(t *testing.T, work string) string {
	store, err := image.NewStore(filepath.Join(work, "images"), 0)
	if err != nil {
		t.Fatal(err)
	}
	md, err := store.BuildBusybox(t.Context(), "/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := image.Unpack(t.Context(), store.Path(md.Fingerprint), rootfs); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(work, "disk.raw")
	run(t, "", nil, "mkfs.ext4", "-q", "-F", "-d", rootfs, disk, "64M")
	return disk
}

// guest is a running QEMU.
type guest struct {
	cmd     *exec.Cmd
	sock    string
	qmp     string
	console string
	started time.Time
	exited  chan struct{}
}

func startGuest(t *testing.T, work, kdir, initrd, disk string) *guest {
	g := &guest{
		sock:    filepath.Join(work, "agent.sock"),
		qmp:     filepath.Join(work, "qmp.sock"),
		console: filepath.Join(work, "console.log"),
		exited:  make(chan struct{}),
	}
	_ = os.Remove(g.sock)
	_ = os.Remove(g.qmp)
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-machine", "q35",
		"-accel", "tcg", "-cpu", "qemu64", "-smp", "1", "-m", "256",
		"-kernel", filepath.Join(kdir, "vmlinuz"), "-initrd", initrd,
		"-append", "console=ttyS0 quiet root=/dev/vda rw vessel.hostname=vmagent-guest vessel.stopsignal=SIGUSR2 " +
			"vessel.net=" + guestMAC + ",10.0.2.15/24,10.0.2.2",
		"-drive", "file=" + disk + ",format=raw,if=none,id=root,cache=unsafe",
		"-device", "virtio-blk-pci,drive=root",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,mac=" + guestMAC,
		"-chardev", "socket,id=agent,path=" + g.sock + ",server=on,wait=off",
		"-device", "virtio-serial-pci", "-device", "virtserialport,chardev=agent,name=" + agent.PortName,
		"-chardev", "file,id=console,path=" + g.console, "-serial", "chardev:console",
		"-qmp", "unix:" + g.qmp + ",server=on,wait=off",
		"-no-reboot",
	}
	g.cmd = exec.Command("qemu-system-x86_64", args...)
	var stderr bytes.Buffer
	g.cmd.Stderr = &stderr
	g.started = time.Now()
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		g.kill()
		if t.Failed() {
			con, _ := os.ReadFile(g.console)
			t.Logf("qemu stderr: %s\nconsole:\n%s", stderr.String(), con)
		}
	})
	return g
}

// kill ends the QEMU this test started (by its pid) and waits for it.
func (g *guest) kill() {
	_ = g.cmd.Process.Kill()
	<-g.exited
}

func (g *guest) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", g.sock)
}

// connect waits for the agent to answer and returns the time since QEMU
// started.
func (g *guest) connect(t *testing.T) (*agent.Client, agent.Info, time.Duration) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-g.exited: // no agent will answer
			cancel()
		case <-ctx.Done():
		}
	}()
	c, info, err := agent.Dial(ctx, g.dial, agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(g.started)
	t.Cleanup(func() { _ = c.Close() })
	return c, info, took
}

// powerButton presses the ACPI power button over QMP.
func (g *guest) powerButton(t *testing.T) {
	t.Helper()
	c, err := net.Dial("unix", g.qmp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	dec := json.NewDecoder(c)
	var greeting map[string]any
	if err := dec.Decode(&greeting); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"qmp_capabilities", "system_powerdown"} {
		if _, err := fmt.Fprintf(c, `{"execute":%q}`+"\n", cmd); err != nil {
			t.Fatal(err)
		}
		for {
			var reply map[string]any
			if err := dec.Decode(&reply); err != nil {
				t.Fatal(err)
			}
			if _, ok := reply["event"]; ok {
				continue
			}
			if _, ok := reply["return"]; !ok {
				t.Fatalf("%s: %v", cmd, reply)
			}
			break
		}
	}
}

func execOut(t *testing.T, c *agent.Client, o agent.ExecOptions) (agent.ExitStatus, string) {
	t.Helper()
	var out bytes.Buffer
	o.Stdout, o.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, err := c.Exec(ctx, o)
	if err != nil {
		t.Fatalf("exec %v: %v", o.Args, err)
	}
	return st, out.String()
}

func TestGuestAgent(t *testing.T) {
	testutil.NeedRoot(t)
	kdir := kernelDir(t)
	work := t.TempDir()
	initrd := buildInitramfs(t, work, kdir)
	disk := buildDisk(t, work)

	g := startGuest(t, work, kdir, initrd, disk)
	c, info, took := g.connect(t)
	t.Logf("agent answered %.2fs after QEMU started (guest: ready %.2fs after boot), kernel %s", took.Seconds(), info.ReadyAfter, info.Kernel)
	if info.Init != "/sbin/init" || !strings.Contains(info.Kernel, "cloud-amd64") {
		t.Errorf("info %+v", info)
	}

	// The root was switched: PID 1 is the image's busybox init, / is the disk.
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "readlink /proc/1/exe; grep ' / ' /proc/mounts"}}); st.Code != 0 ||
		!strings.Contains(out, "/bin/busybox\n") || !strings.Contains(out, "/dev/vda / ext4 rw") {
		t.Errorf("after the switch: %+v %q", st, out)
	}
	// busybox init ran its sysinit script (rcS says so on the console).
	waitConsole(t, g, "vessel: ")
	// Its inittab starts nothing on the console: the agent runs the
	// image's getty there (getty.go), whose prompt names the host.
	waitConsole(t, g, "vmagent-guest login:")
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline; echo; done | grep '^/sbin/getty -L ttyS0'`}}); st.Code != 0 {
		t.Errorf("no getty on ttyS0: %+v %q", st, out)
	}

	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"echo", "hello", "vm"}}); st.Code != 0 || out != "hello vm\n" {
		t.Errorf("echo: %+v %q", st, out)
	}
	if st, _ := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "exit 7"}}); st.Code != 7 {
		t.Errorf("exit 7: %+v", st)
	}
	if st, _ := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "kill -KILL $$"}}); st.Signal != 9 || st.Code != 137 {
		t.Errorf("killed: %+v", st)
	}
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"no-such-cmd"}}); st.Code != 127 || !strings.Contains(out, "no-such-cmd") {
		t.Errorf("missing command: %+v %q", st, out)
	}
	uid, gid := uint32(1000), uint32(1000)
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"id", "-u"}, UID: &uid, GID: &gid, Cwd: "/tmp"}); st.Code != 0 || out != "1000\n" {
		t.Errorf("as 1000: %+v %q", st, out)
	}
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "tty; stty size"}, TTY: true, Width: 90, Height: 20}); st.Code != 0 ||
		!strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "20 90") {
		t.Errorf("tty: %+v %q", st, out)
	}
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "ip -4 -o addr show eth0; ip route"}}); st.Code != 0 ||
		!strings.Contains(out, "10.0.2.15/24") || !strings.Contains(out, "default via 10.0.2.2") {
		t.Errorf("network from vessel.net=: %+v %q", st, out)
	}

	// A file pushed in, read back by a command and pulled out.
	data := make([]byte, 3<<20+7)
	_, _ = rand.Read(data)
	sum := sha256.Sum256(data)
	if err := c.PushFile(t.Context(), "/root/blob", bytes.NewReader(data), agent.FileOptions{Mode: 0o640, UID: 1000, GID: 100}); err != nil {
		t.Fatal(err)
	}
	if st, out := execOut(t, c, agent.ExecOptions{Args: []string{"sh", "-c", "sha256sum /root/blob; stat -c '%a %u %g' /root/blob"}}); st.Code != 0 ||
		out != hex.EncodeToString(sum[:])+"  /root/blob\n640 1000 100\n" {
		t.Errorf("pushed file in the guest: %+v %q", st, out)
	}
	var back bytes.Buffer
	if fi, err := c.PullFile(t.Context(), "/root/blob", &back); err != nil || sha256.Sum256(back.Bytes()) != sum || fi.Mode != 0o640 {
		t.Errorf("pull: %+v %v", fi, err)
	}

	// vesseld restarts: the host side closes in the middle of a command and
	// reconnects; the agent serves a fresh session.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(t.Context(), agent.ExecOptions{Args: []string{"sleep", "600"}})
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	_ = c.Close()
	if err := <-errc; err == nil {
		t.Error("exec outlived its session")
	}
	c2, _, _ := g.connect(t)
	// The old session's command is killed once the agent sees the host
	// side close.
	for i := 0; ; i++ {
		_, out := execOut(t, c2, agent.ExecOptions{Args: []string{"sh", "-c", "cat /proc/[0-9]*/comm | grep -x sleep || echo none"}})
		if out == "none\n" {
			break
		}
		if i == 100 {
			t.Fatalf("the old session's command still runs: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if _, out := execOut(t, c2, agent.ExecOptions{Args: []string{"sh", "-c", "hostname; cat /etc/hostname"}}); out != "vmagent-guest\nvmagent-guest\n" {
		t.Errorf("hostname: %q", out)
	}

	// The ACPI power button: the agent turns it into busybox init's stop
	// signal (vessel.stopsignal=), init shuts the guest down.
	g.powerButton(t)
	select {
	case <-g.exited:
	case <-time.After(2 * time.Minute):
		t.Error("the guest did not power off")
	}
}

// TestGuestBootToAgent measures QEMU's start to the agent's first answer
// over VESSEL_AGENT_BOOTS boots (default 1) and logs them as JSON.
func TestGuestBootToAgent(t *testing.T) {
	testutil.NeedRoot(t)
	boots := 1
	if n, err := strconv.Atoi(os.Getenv("VESSEL_AGENT_BOOTS")); err == nil && n > 0 {
		boots = n
	}
	kdir := kernelDir(t)
	work := t.TempDir()
	initrd := buildInitramfs(t, work, kdir)
	disk := buildDisk(t, work)
	var host, guestReady []float64
	for range boots {
		g := startGuest(t, work, kdir, initrd, disk)
		c, info, took := g.connect(t)
		host = append(host, took.Seconds())
		guestReady = append(guestReady, info.ReadyAfter)
		_ = c.Close()
		g.kill()
	}
	res, _ := json.Marshal(map[string]any{
		"accel": "tcg", "boots": boots,
		"qemu_start_to_ping_s":     summary(host),
		"guest_boot_to_ready_s":    summary(guestReady),
		"qemu_start_to_ping_all_s": host,
	})
	fmt.Println(string(res))
}

func summary(v []float64) map[string]float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	// p90: nearest rank.
	return map[string]float64{"median": s[len(s)/2], "p90": s[(len(s)*9+9)/10-1], "min": s[0], "max": s[len(s)-1]}
}

// waitConsole waits for text on the guest's console.
func waitConsole(t *testing.T, g *guest, text string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(g.console); bytes.Contains(b, []byte(text)) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("no %q on the console", text)
}
