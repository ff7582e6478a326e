package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/testutil"
)

// testPath names a fresh cgroup for a root test (it marks the test as one).
func testPath(t *testing.T) string {
	t.Helper()
	testutil.NeedRoot(t)
	return fmt.Sprintf("/vessel-test-%d-%d/c1", os.Getpid(), time.Now().UnixNano()%100000)
}

func TestNewRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "rel/path", "/a/../b", "/"} {
		if _, err := New(p); err == nil {
			t.Errorf("New(%q) succeeded", p)
		}
	}
}

func TestLifecycle(t *testing.T) {
	path := testPath(t)
	m, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := New(path[:len(path)-len("/c1")])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(); _ = parent.Destroy() })

	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	if err := m.Create(); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if !m.Exists() {
		t.Fatal("cgroup does not exist after Create")
	}

	// Move a real process in through cgroup.procs and watch it freeze.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := m.(*cgroup).m.Apply(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := m.Pids()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("Pids = %v, %v; want %d in it", pids, err, cmd.Process.Pid)
	}
	got, err := ProcessCgroup(cmd.Process.Pid, "memory")
	if err != nil || got != path {
		t.Fatalf("ProcessCgroup = %q, %v; want %q", got, err, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Thaw(); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids != 1 {
		t.Errorf("Stats.Pids = %d, want 1", st.Pids)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := m.Destroy(); err != nil {
		t.Fatal(err)
	}
	if m.Exists() {
		t.Fatal("cgroup exists after Destroy")
	}
	if err := m.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

// wholeDisk returns a whole disk of this machine ("MAJ:MIN"), not a loop
// device.
func wholeDisk(t *testing.T) string {
	t.Helper()
	devs, _ := filepath.Glob("/sys/block/*/dev")
	for _, d := range devs {
		name := filepath.Base(filepath.Dir(d))
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "zram") || strings.HasPrefix(name, "ram") {
			continue
		}
		b, err := os.ReadFile(d)
		if err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatal("no whole disk found in /sys/block")
	return ""
}

// readCgroup reads a file of the cgroup at path in a controller's
// hierarchy (v1) or the unified one (v2).
func readCgroup(t *testing.T, controller, path, file string) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", path)
	if HostVersion() == V1 {
		dir = filepath.Join("/sys/fs/cgroup", controller, path)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSetLimits applies limits to a real cgroup and reads the kernel's
// files back, then removes them again.
func TestSetLimits(t *testing.T) {
	path := testPath(t)
	m, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := New(filepath.Dir(path))
	t.Cleanup(func() { _ = m.Destroy(); _ = parent.Destroy() })
	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	disk := wholeDisk(t)
	maj, min, err := ParseDevice(disk)
	if err != nil {
		t.Fatal(err)
	}
	r := Resources{CPUQuota: 0.5, CPUWeight: 200, MemoryMax: 64 << 20, PidsMax: 30,
		Devices: []DeviceLimit{{Major: maj, Minor: min, ReadBPS: 20 << 20, WriteBPS: 10 << 20, ReadIOPS: 500, WriteIOPS: 400}}}
	if err := m.Set(r); err != nil {
		t.Fatal(err)
	}
	if HostVersion() == V1 {
		for _, c := range []struct{ ctrl, file, want string }{
			{"cpu", "cpu.cfs_quota_us", "50000"},
			{"cpu", "cpu.shares", "2048"},
			{"memory", "memory.limit_in_bytes", "67108864"},
			{"pids", "pids.max", "30"},
			{"blkio", "blkio.throttle.read_bps_device", disk + " 20971520"},
			{"blkio", "blkio.throttle.write_bps_device", disk + " 10485760"},
			{"blkio", "blkio.throttle.read_iops_device", disk + " 500"},
			{"blkio", "blkio.throttle.write_iops_device", disk + " 400"},
		} {
			if got := readCgroup(t, c.ctrl, path, c.file); got != c.want {
				t.Errorf("%s = %q, want %q", c.file, got, c.want)
			}
		}
	} else {
		for _, c := range []struct{ file, want string }{
			{"cpu.max", "50000 100000"}, {"cpu.weight", "200"}, {"memory.max", "67108864"}, {"pids.max", "30"},
			{"io.max", disk + " rbps=20971520 wbps=10485760 riops=500 wiops=400"},
		} {
			if got := readCgroup(t, "", path, c.file); got != c.want {
				t.Errorf("%s = %q, want %q", c.file, got, c.want)
			}
		}
	}
	st, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryLimit != 64<<20 {
		t.Errorf("Stats.MemoryLimit = %d", st.MemoryLimit)
	}

	// Unset: every limit goes.
	if err := m.Set(Resources{Devices: []DeviceLimit{{Major: maj, Minor: min}}}); err != nil {
		t.Fatal(err)
	}
	if HostVersion() == V1 {
		for _, c := range []struct{ ctrl, file, want string }{
			{"cpu", "cpu.cfs_quota_us", "-1"},
			{"cpu", "cpu.shares", "1024"},
			{"pids", "pids.max", "max"},
			{"blkio", "blkio.throttle.read_bps_device", ""},
			{"blkio", "blkio.throttle.write_iops_device", ""},
		} {
			if got := readCgroup(t, c.ctrl, path, c.file); got != c.want {
				t.Errorf("after reset %s = %q, want %q", c.file, got, c.want)
			}
		}
	} else if got := readCgroup(t, "", path, "io.max"); got != "" {
		t.Errorf("after reset io.max = %q", got)
	}
	if st, err := m.Stats(); err != nil || st.MemoryLimit != 0 {
		t.Errorf("after reset Stats.MemoryLimit = %d, %v", st.MemoryLimit, err)
	}
}

// TestEnter moves this test process into a cpu-only cgroup and back.
func TestEnter(t *testing.T) {
	path := testPath(t)
	m, err := New(path, Controllers("cpu", "cpuacct"))
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := New(filepath.Dir(path), Controllers("cpu", "cpuacct"))
	t.Cleanup(func() { _ = m.Destroy(); _ = parent.Destroy() })
	before, err := ProcessCgroup(os.Getpid(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	memBefore, _ := ProcessCgroup(os.Getpid(), "memory")
	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(Resources{CPUWeight: 1000}); err != nil {
		t.Fatal(err)
	}
	leave, err := Enter(m)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ProcessCgroup(os.Getpid(), "cpu"); got != path {
		t.Errorf("cpu cgroup after Enter = %q, want %q", got, path)
	}
	// On v1 the other hierarchies are left alone; v2 has one hierarchy.
	if got, _ := ProcessCgroup(os.Getpid(), "memory"); HostVersion() == V1 && got != memBefore {
		t.Errorf("memory cgroup changed to %q (cpu-only cgroup)", got)
	}
	// A child is born in the cgroup.
	out, err := exec.Command("cat", "/proc/self/cgroup").Output()
	if err != nil || !strings.Contains(string(out), path) {
		t.Errorf("child's cgroups:\n%s (%v)", out, err)
	}
	if err := leave(); err != nil {
		t.Fatal(err)
	}
	if got, _ := ProcessCgroup(os.Getpid(), "cpu"); got != before {
		t.Errorf("cpu cgroup after leave = %q, want %q", got, before)
	}
	if HostVersion() == V1 {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", path)); err == nil {
			t.Errorf("a cpu-only cgroup exists in the memory hierarchy")
		}
	}
	if err := m.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestSiblings(t *testing.T) {
	for _, c := range []struct{ a, b, wa, wb string }{
		{"/vessel.slice/vessel-control.slice/vesseld.service", "/vessel.slice/vessel-instances.service",
			"/vessel.slice/vessel-control.slice", "/vessel.slice/vessel-instances.service"},
		{"/vessel-control", "/vessel", "/vessel-control", "/vessel"},
		{"/user.slice/user-0.slice/session-1.scope", "/vessel", "/user.slice", "/vessel"},
	} {
		a, b, err := siblings(c.a, c.b)
		if err != nil || a != c.wa || b != c.wb {
			t.Errorf("siblings(%s, %s) = %s, %s, %v; want %s, %s", c.a, c.b, a, b, err, c.wa, c.wb)
		}
	}
	for _, c := range [][2]string{{"/vessel", "/vessel/c1"}, {"/a", "/a"}, {"a", "/b"}, {"/", "/b"}} {
		if _, _, err := siblings(c[0], c[1]); err == nil {
			t.Errorf("siblings(%s, %s): no error", c[0], c[1])
		}
	}
}
