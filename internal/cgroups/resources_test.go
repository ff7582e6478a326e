package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
)

func TestCPUWeightShares(t *testing.T) {
	for _, c := range []struct{ weight, shares uint64 }{
		{1, 10}, {10, 102}, {100, 1024}, {1000, 10240}, {10000, 102400},
	} {
		if got := CPUWeightToShares(c.weight); got != c.shares {
			t.Errorf("CPUWeightToShares(%d) = %d, want %d", c.weight, got, c.shares)
		}
		if got := CPUSharesToWeight(c.shares); got != c.weight {
			t.Errorf("CPUSharesToWeight(%d) = %d, want %d", c.shares, got, c.weight)
		}
	}
	// Every weight survives the round trip, and ratios are kept.
	for w := uint64(MinCPUWeight); w <= MaxCPUWeight; w++ {
		if got := CPUSharesToWeight(CPUWeightToShares(w)); got != w {
			t.Fatalf("round trip of weight %d gives %d", w, got)
		}
	}
	if CPUWeightToShares(1000) != 10*CPUWeightToShares(100) {
		t.Errorf("10x the weight is not 10x the shares")
	}
	// Shares outside the v1 range clamp into the v2 range.
	if CPUSharesToWeight(2) != 1 || CPUSharesToWeight(262144) != 10000 {
		t.Errorf("clamping: %d %d", CPUSharesToWeight(2), CPUSharesToWeight(262144))
	}
}

func TestToOCI(t *testing.T) {
	none := Resources{}.toOCI(V1)
	if none.CpuQuota != -1 || none.Memory != -1 || *none.PidsLimit != -1 || none.CpuShares != 1024 || !none.SkipDevices {
		t.Errorf("unlimited v1: %+v", none)
	}
	r := Resources{CPUQuota: 1.5, CPUWeight: 1000, MemoryMax: 64 << 20, PidsMax: 50,
		Devices: []DeviceLimit{{Major: 7, Minor: 3, ReadBPS: 1 << 20}}}
	v1 := r.toOCI(V1)
	if v1.CpuQuota != 150000 || v1.CpuPeriod != CPUPeriod || v1.CpuShares != 10240 || v1.CpuWeight != 0 ||
		v1.Memory != 64<<20 || *v1.PidsLimit != 50 {
		t.Errorf("v1: %+v", v1)
	}
	if len(v1.BlkioThrottleReadBpsDevice) != 1 || v1.BlkioThrottleReadBpsDevice[0].String() != "7:3 1048576" ||
		v1.BlkioThrottleWriteBpsDevice[0].String() != "7:3 0" {
		t.Errorf("v1 throttles: %v %v", v1.BlkioThrottleReadBpsDevice, v1.BlkioThrottleWriteBpsDevice)
	}
	v2 := r.toOCI(V2)
	if v2.CpuWeight != 1000 || v2.CpuShares != 0 || len(v2.BlkioThrottleReadBpsDevice) != 0 {
		t.Errorf("v2: %+v", v2)
	}
	for _, bad := range []Resources{{CPUQuota: -1}, {CPUQuota: 0.001}, {CPUWeight: 10001}, {DiskWeight: 1001}, {MemoryMax: -5}} {
		if bad.validate() == nil {
			t.Errorf("%+v validates", bad)
		}
	}
}

func TestIOMaxLine(t *testing.T) {
	got := ioMaxLine(DeviceLimit{Major: 254, Minor: 0, WriteBPS: 10 << 20, ReadIOPS: 100})
	if want := "254:0 rbps=max wbps=10485760 riops=100 wiops=max"; got != want {
		t.Errorf("ioMaxLine = %q, want %q", got, want)
	}
}

func TestParseScheduler(t *testing.T) {
	active, avail := parseScheduler("none [mq-deadline] kyber bfq\n")
	if active != "mq-deadline" || strings.Join(avail, ",") != "none,mq-deadline,kyber,bfq" {
		t.Errorf("got %q %v", active, avail)
	}
}

func TestSetBFQTunables(t *testing.T) {
	dir := t.TempDir()
	fakeFile(t, dir, "low_latency", "1")
	fakeFile(t, dir, "slice_idle_us", "8000")
	if err := setBFQTunables(dir, 0); err != nil {
		t.Fatal(err)
	}
	if got := readFake(t, dir, "low_latency") + "/" + readFake(t, dir, "slice_idle_us"); got != "0/8000" {
		t.Errorf("slice idle 0: got %s, want 0/8000 (BFQ's own idle kept)", got)
	}
	if err := setBFQTunables(dir, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := readFake(t, dir, "slice_idle_us"); got != "30000" {
		t.Errorf("slice_idle_us = %s, want 30000", got)
	}
	// A device whose scheduler is not bfq has no such files.
	if err := setBFQTunables(filepath.Join(dir, "none"), 0); err == nil {
		t.Error("no error without BFQ's files")
	}
}

// fakeFile writes a file of a fake cgroupfs.
func fakeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFake(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// fakeMode lets runc's library write ordinary files (its unit-test mode).
func fakeMode(t *testing.T) {
	occgroups.TestMode = true
	t.Cleanup(func() { occgroups.TestMode = false })
}

// TestSetV2Fake applies Resources through the v2 backend to a fake cgroupfs
// directory: this host runs v1, so this is how the v2 file writes are
// checked. The kernel's acceptance of them is not.
func TestSetV2Fake(t *testing.T) {
	fakeMode(t)
	dir := t.TempDir()
	fakeFile(t, dir, "cgroup.controllers", "cpu io memory pids")
	fakeFile(t, dir, "io.bfq.weight", "default 100")
	fakeFile(t, dir, "io.weight", "default 100")
	m, err := fs2.NewManager(&occgroups.Cgroup{Resources: &occgroups.Resources{}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &cgroup{path: "/fake", version: V2, m: m}
	r := Resources{CPUQuota: 0.5, CPUWeight: 1000, MemoryMax: 256 << 20, PidsMax: 100, DiskWeight: 200,
		Devices: []DeviceLimit{{Major: 7, Minor: 3, ReadBPS: 20 << 20, WriteIOPS: 300}}}
	if err := c.Set(r); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu.weight":    "1000",
		"cpu.max":       "50000 100000",
		"memory.max":    "268435456",
		"pids.max":      "100",
		"io.bfq.weight": "200",
		"io.weight":     "default 200",
		"io.max":        "7:3 rbps=20971520 wbps=max riops=max wiops=300",
	} {
		if got := readFake(t, dir, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// Everything unset: limits removed, weights back to their defaults.
	if err := c.Set(Resources{Devices: []DeviceLimit{{Major: 7, Minor: 3}}}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu.weight": "100", "cpu.max": "max 100000", "memory.max": "max", "memory.swap.max": "max",
		"pids.max": "max", "io.bfq.weight": "100", "io.max": "7:3 rbps=max wbps=max riops=max wiops=max",
	} {
		if got := readFake(t, dir, file); got != want {
			t.Errorf("after reset %s = %q, want %q", file, got, want)
		}
	}

	fakeFile(t, dir, "io.stat", "7:3 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n254:0 rbytes=10 wbytes=20 rios=3 wios=4 dbytes=0 dios=0\n")
	fakeFile(t, dir, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n")
	io, err := readIOStats(V2, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(io) != 2 || io[1].Device != "7:3" || io[1].ReadBytes != 4096 || io[1].WriteBytes != 8192 ||
		io[1].ReadOps != 1 || io[1].WriteOps != 2 || io[0].Device != "254:0" || io[0].WriteOps != 4 {
		t.Errorf("io stats: %+v", io)
	}
	if n, err := readOOMKills(V2, dir); err != nil || n != 2 {
		t.Errorf("oom kills = %d, %v", n, err)
	}
}

// TestSetV2FakeNoBFQ: without io.bfq.weight and io.weight a disk weight
// cannot be honoured, and the default weight is simply not written.
func TestSetV2FakeNoBFQ(t *testing.T) {
	fakeMode(t)
	dir := t.TempDir()
	fakeFile(t, dir, "cgroup.controllers", "cpu io memory pids")
	m, err := fs2.NewManager(&occgroups.Cgroup{Resources: &occgroups.Resources{}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &cgroup{path: "/fake", version: V2, m: m}
	if err := c.Set(Resources{DiskWeight: 500}); err == nil || !strings.Contains(err.Error(), ErrNoDiskWeight.Error()) {
		t.Errorf("disk weight without a scheduler: %v", err)
	}
	if err := c.Set(Resources{}); err != nil {
		t.Errorf("default weight without a scheduler: %v", err)
	}
}

// TestSetV1Fake applies Resources through the v1 backend to fake per
// controller directories (the real v1 kernel path is TestSetLimits).
func TestSetV1Fake(t *testing.T) {
	fakeMode(t)
	root := t.TempDir()
	paths := map[string]string{}
	for _, c := range []string{"cpu", "memory", "pids", "blkio"} {
		paths[c] = filepath.Join(root, c)
		if err := os.MkdirAll(paths[c], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeFile(t, paths["blkio"], "blkio.bfq.weight", "100")
	m, err := fs.NewManager(&occgroups.Cgroup{Resources: &occgroups.Resources{}}, paths)
	if err != nil {
		t.Fatal(err)
	}
	c := &cgroup{path: "/fake", version: V1, m: m}
	r := Resources{CPUQuota: 2, CPUWeight: 50, MemoryMax: 1 << 30, PidsMax: 7, DiskWeight: 300,
		Devices: []DeviceLimit{{Major: 7, Minor: 3, WriteBPS: 5 << 20}}}
	if err := c.Set(r); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu/cpu.shares":                        "512",
		"cpu/cpu.cfs_quota_us":                  "200000",
		"cpu/cpu.cfs_period_us":                 "100000",
		"memory/memory.limit_in_bytes":          "1073741824",
		"pids/pids.max":                         "7",
		"blkio/blkio.bfq.weight":                "300",
		"blkio/blkio.throttle.write_bps_device": "7:3 5242880",
		"blkio/blkio.throttle.read_bps_device":  "7:3 0",
	} {
		if got := readFake(t, root, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}

	fakeFile(t, paths["blkio"], "blkio.throttle.io_service_bytes_recursive",
		"7:3 Read 1000\n7:3 Write 2000\n7:3 Sync 0\n7:3 Async 3000\n7:3 Discard 0\n7:3 Total 3000\nTotal 3000\n")
	fakeFile(t, paths["blkio"], "blkio.throttle.io_serviced_recursive",
		"7:3 Read 10\n7:3 Write 20\n7:3 Total 30\nTotal 30\n")
	fakeFile(t, paths["memory"], "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
	io, err := readIOStats(V1, paths["blkio"])
	if err != nil {
		t.Fatal(err)
	}
	if len(io) != 1 || io[0] != (DeviceIO{Device: "7:3", Name: DeviceName("7:3"), ReadBytes: 1000, WriteBytes: 2000, ReadOps: 10, WriteOps: 20}) {
		t.Errorf("io stats: %+v", io)
	}
	if n, err := readOOMKills(V1, paths["memory"]); err != nil || n != 5 {
		t.Errorf("oom kills = %d, %v", n, err)
	}
}
