package vm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/testutil"
)

// testInit is a stand-in for vessel-agent init, for this package's tests
// only: it loads the modules vessel.load lists, mounts the root disk and
// switches to it.
const testInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
while read -r m; do /bin/busybox insmod "$m" || echo "test-init: insmod $m failed"; done </lib/modules/vessel.load
/bin/busybox mount -t ext4 /dev/vda /mnt/root || exec /bin/busybox sh
echo "test-init: switching root"
/bin/busybox mount --move /dev /mnt/root/dev
/bin/busybox umount /proc
exec /bin/busybox switch_root /mnt/root /sbin/init
`

// guestInit is the test disk's /sbin/init: it says it runs, and powers off
// on any input event (the ACPI power button's).
const guestInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo "guest-init: running as pid $$"
for e in /dev/input/event*; do
	( /bin/busybox head -c 1 "$e" >/dev/null; echo "guest-init: power button"; /bin/busybox poweroff -f ) &
done
while :; do /bin/busybox sleep 3600; done
`

// testRootfs makes a tiny root tree: busybox and guestInit.
func testRootfs(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "sbin", "dev", "proc", "sys", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755))
	must(os.WriteFile(filepath.Join(root, "sbin/init"), []byte(guestInit), 0o755))
	return root
}

// testInitramfs builds an initramfs of testInit, busybox and the boot
// modules.
func testInitramfs(t *testing.T, dir string) string {
	t.Helper()
	k := Kernel{Dir: DefaultKernelDir}
	mods, err := k.Modules(t.Context(), BootModules)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := BuildInitramfs(&buf, []byte(testInit), mods, File{Path: "/bin/busybox", Mode: 0o755, Data: bb}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "initramfs.img")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls the console log until it holds want or ctx ends.
func waitFor(ctx context.Context, t *testing.T, log, want string) {
	t.Helper()
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q on the console; it says:\n%s", want, b)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestBootTCG boots the cloud kernel with vessel's initramfs layout and a
// disk built by BuildDisk, under the host's accelerator: QEMU starts
// detached and paused, QMP lets it run, the guest's init prints on the
// serial console, a second Find reattaches, and the ACPI power button
// makes it power off. No timing is asserted: TCG takes tens of seconds.
func TestBootTCG(t *testing.T) {
	testutil.NeedRoot(t)
	dir := t.TempDir()
	if err := BuildDisk(t.Context(), testRootfs(t), dir, 0); err != nil {
		t.Fatal(err)
	}
	cfg := qemu.Config{
		Name: "boottest", Accel: qemu.Detect(qemu.HostProbe()).Accel, CPUs: 1, MemoryMiB: 256,
		Kernel: Kernel{Dir: DefaultKernelDir}.Vmlinuz(), Initrd: testInitramfs(t, dir),
		Cmdline: Cmdline(Boot{Hostname: "boottest"}),
		Disk:    qemu.ProbeDisk(filepath.Join(dir, DiskFile)),
		RunDir:  filepath.Join(dir, "run"), ConsoleLog: filepath.Join(dir, "console.log"), Paused: true,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	p, err := qemu.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer kcancel()
		if err := p.Kill(kctx); err != nil {
			t.Errorf("kill qemu %d: %v", p.Pid, err)
		}
	})
	mon, err := qemu.Connect(ctx, cfg.QMPSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if s, err := mon.QueryStatus(ctx); err != nil || s.Running || s.Status != "prelaunch" {
		t.Fatalf("before cont: %+v %v", s, err)
	}
	if err := mon.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := mon.QueryStatus(ctx); err != nil || !s.Running {
		t.Fatalf("after cont: %+v %v", s, err)
	}
	waitFor(ctx, t, cfg.ConsoleLog, "guest-init: running as pid 1")
	// Reported, never asserted: how long the boot took here.
	t.Logf("accel %s: qemu start to the disk's init running: %.2f s", cfg.Accel, time.Since(t0).Seconds())

	again, err := qemu.Find(cfg.RunDir, cfg.Name)
	if err != nil || again.Pid != p.Pid {
		t.Fatalf("Find: %v %v", again, err)
	}
	if _, err := qemu.Find(cfg.RunDir, "other"); err == nil {
		t.Error("Find recognised the qemu as another vm's")
	}
	// The guest's power-off handlers are up once init has forked them; press
	// until QEMU ends (a press before they read is lost).
	for done := false; !done; {
		if err := mon.SystemPowerdown(ctx); err != nil {
			t.Logf("system_powerdown: %v", err)
		}
		select {
		case <-p.Done():
			done = true
		case <-again.Done():
			done = true
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			b, _ := os.ReadFile(cfg.ConsoleLog)
			t.Fatalf("the guest did not power off; console:\n%s", b)
		}
	}
	<-p.Done()
	waitFor(ctx, t, cfg.ConsoleLog, "guest-init: power button")
}
