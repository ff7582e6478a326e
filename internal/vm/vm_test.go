package vm

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// fakeModules is a module table: name -> deps; builtins have no entry
// but are listed in builtins.
type fakeModules struct {
	deps     map[string][]string
	builtins []string
}

func (f fakeModules) builtin(n string) bool { return slices.Contains(f.builtins, n) }
func (f fakeModules) load(_ context.Context, n string) ([]byte, []string, error) {
	d, ok := f.deps[n]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrModule, n)
	}
	return []byte("obj:" + n), d, nil
}

func names(ms []Module) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Name)
	}
	return strings.Join(s, " ")
}

func TestResolveOrder(t *testing.T) {
	src := fakeModules{
		deps: map[string][]string{
			"virtio_blk": {"virtio_ring"}, "virtio_ring": nil,
			"vmw_vsock_virtio_transport":        {"vmw_vsock_virtio_transport_common", "vsock"},
			"vmw_vsock_virtio_transport_common": {"vsock"}, "vsock": nil,
			"evdev": nil,
		},
		builtins: []string{"ext4", "virtio_pci"},
	}
	got, err := resolve(t.Context(), src, []string{"virtio-pci", "virtio_blk", "vmw_vsock_virtio_transport", "ext4", "evdev", "virtio_blk"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "virtio_ring virtio_blk vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport evdev"; names(got) != want {
		t.Fatalf("order %q, want %q", names(got), want)
	}
	if got[0].File != "virtio_ring.ko" || string(got[0].Data) != "obj:virtio_ring" {
		t.Errorf("module %+v", got[0])
	}
	if _, err := resolve(t.Context(), src, []string{"nope"}); err == nil {
		t.Error("a missing module resolved")
	}
	cyc := fakeModules{deps: map[string][]string{"a": {"b"}, "b": {"a"}}}
	if _, err := resolve(t.Context(), cyc, []string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("cycle: %v", err)
	}
}

func TestCmdline(t *testing.T) {
	n := &Net{MAC: "0a:58:0a:57:00:05", Address: netip.MustParsePrefix("10.87.0.5/24"), Gateway: netip.MustParseAddr("10.87.0.1")}
	got := Cmdline(Boot{Hostname: "vm1", Init: []string{"/sbin/init"}, Net: n})
	want := "console=ttyS0 root=/dev/vda rootfstype=ext4 rw panic=-1 vessel.hostname=vm1 vessel.net=0a:58:0a:57:00:05,10.87.0.5/24,10.87.0.1,"
	if got != want {
		t.Errorf("Cmdline =\n %q, want\n %q", got, want)
	}
	if got := Cmdline(Boot{Init: []string{"/lib/systemd/systemd"}}); !strings.HasSuffix(got, " vessel.init=/lib/systemd/systemd") {
		t.Errorf("init: %q", got)
	}
	if got := Cmdline(Boot{Init: []string{"/bin/sh", "-c", "x"}}); strings.Contains(got, "vessel.init") {
		t.Errorf("multi-word init passed: %q", got)
	}
	if got := Cmdline(Boot{NewMachineID: true}); !strings.HasSuffix(got, " vessel.newid=1") {
		t.Errorf("new machine id: %q", got)
	}
	if strings.Contains(want, "newid") {
		t.Errorf("a boot not asking for a new machine id: %q", want)
	}
}

func TestDiskSize(t *testing.T) {
	if s := DiskSize(10 << 20); s != MinDiskSize {
		t.Errorf("small tree: %d", s)
	}
	if s := DiskSize(3 << 30); s != 7<<30 {
		t.Errorf("3 GiB tree: %d", s)
	}
	if s := DiskSize(3<<30 + 1); s%(1<<20) != 0 {
		t.Errorf("not whole MiB: %d", s)
	}
}

// TestInitramfs checks the archive with cpio itself: every entry, the
// load list, /dev/console a character device.
func TestInitramfs(t *testing.T) {
	cpio := []string{"cpio"}
	if _, err := exec.LookPath("cpio"); err != nil {
		cpio = []string{"busybox", "cpio"} // busybox-static is one of setup's packages
	}
	var buf bytes.Buffer
	mods := []Module{{Name: "a", File: "a.ko", Data: []byte("A")}, {Name: "bb", File: "bb.ko", Data: []byte("BBBBB")}}
	if err := BuildInitramfs(&buf, []byte("#!/bin/sh\necho hi\n"), mods); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, buf.Bytes(), cpio[0], append(cpio[1:], "-itv")...)
	if err != nil {
		t.Fatalf("cpio -t: %v: %s", err, out)
	}
	for _, want := range []string{"init", "lib/modules/a.ko", "lib/modules/bb.ko", "lib/modules/vessel.load", "mnt/root"} {
		if !strings.Contains(out, " "+want+"\n") {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
	if !strings.Contains(out, "crw-------") || !strings.Contains(out, "dev/console") {
		t.Errorf("no /dev/console device in\n%s", out)
	}
	dir := t.TempDir()
	cmd := exec.Command(cpio[0], append(cpio[1:], "-id")...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "console") {
		t.Fatalf("cpio -i: %v: %s", err, out)
	}
	load, err := os.ReadFile(filepath.Join(dir, "lib/modules/vessel.load"))
	if err != nil || string(load) != "/lib/modules/a.ko\n/lib/modules/bb.ko\n" {
		t.Errorf("vessel.load %q %v", load, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lib/modules/bb.ko")); string(b) != "BBBBB" {
		t.Errorf("bb.ko %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dir, "init")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("init: %v %v", fi, err)
	}
}

func runIn(t *testing.T, in []byte, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKernelModules resolves BootModules from the kernel setup.sh unpacks.
func TestKernelModules(t *testing.T) {
	testutil.NeedRoot(t)
	k := Kernel{Dir: DefaultKernelDir}
	if err := k.Check(); err != nil {
		t.Fatal(err)
	}
	mods, err := k.Modules(t.Context(), BootModules)
	if err != nil {
		t.Fatal(err)
	}
	got := names(mods)
	for _, want := range []string{"virtio_blk", "virtio_net", "vmw_vsock_virtio_transport"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s in %s", want, got)
		}
	}
	// Each module comes after the modules it depends on.
	pos := map[string]int{}
	for i, m := range mods {
		pos[m.Name] = i
		if !bytes.HasPrefix(m.Data, []byte("\x7fELF")) {
			t.Errorf("%s is not an ELF object (still compressed?)", m.Name)
		}
		deps, err := moduleDepends(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if p, ok := pos[modName(d)]; !ok && !(&dirSourceCheck{k}).builtin(d) || ok && p > i {
				t.Errorf("%s loads before its dependency %s", m.Name, d)
			}
		}
	}
	t.Logf("modules: %s", got)
}

type dirSourceCheck struct{ k Kernel }

func (c *dirSourceCheck) builtin(n string) bool {
	s, err := c.k.source()
	return err == nil && s.builtin(modName(n))
}
