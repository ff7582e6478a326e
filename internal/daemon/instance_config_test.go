package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/cgroups"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512MiB": 512 << 20, "1GB": 1e9, "1gb": 1e9, "10MB": 10e6, "1.5GiB": 3 << 29,
		"64m": 64 << 20, "2G": 2 << 30, "100 kB": 100e3, "7B": 7, "1TiB": 1 << 40,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "MiB", "12XB", "1e9", "0x10", "1.2.3MB", "2000000TiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
	if r, err := parseRate("20MiB/s"); err != nil || r != 20<<20 {
		t.Errorf("parseRate = %d, %v", r, err)
	}
	if n, err := parseIOPS("100iops"); err != nil || n != 100 {
		t.Errorf("parseIOPS = %d, %v", n, err)
	}
	if n, err := parseIOPS("250"); err != nil || n != 250 {
		t.Errorf("parseIOPS = %d, %v", n, err)
	}
}

func TestValidateConfig(t *testing.T) {
	good := map[string]string{
		KeyCPU: "1.5", KeyCPUWeight: "1000", KeyMemory: "512MiB", KeyProcesses: "100",
		KeyDiskRead: "20MB/s", KeyDiskWrite: "10MiB", KeyDiskReadOps: "100iops", KeyDiskWriteOps: "50",
		KeyDiskWeight: "500", "user.note": "anything at all",
	}
	if err := validateConfig(good); err != nil {
		t.Fatal(err)
	}
	// Each bad value is refused with the accepted range in the message.
	for kv, want := range map[[2]string]string{
		{KeyCPU, "0"}:             "between 0.01 and 1024",
		{KeyCPU, "-1"}:            "not a number of CPUs",
		{KeyCPU, "2000"}:          "between 0.01 and 1024",
		{KeyCPUWeight, "0"}:       "between 1 and 10000",
		{KeyCPUWeight, "1.5"}:     "between 1 and 10000",
		{KeyMemory, "1MiB"}:       "at least 4MiB",
		{KeyMemory, "lots"}:       "not a size",
		{KeyProcesses, "0"}:       "between 1 and 4194304",
		{KeyDiskRead, "10"}:       "at least 1KiB",
		{KeyDiskWrite, "fast"}:    "not a size",
		{KeyDiskReadOps, "0iops"}: "between 1 and",
		{KeyDiskWeight, "1001"}:   "between 1 and 1000",
		{"limits.cpus", "1"}:      "unknown configuration key",
		{"user.", "x"}:            "unknown configuration key",
	} {
		err := validateConfig(map[string]string{kv[0]: kv[1]})
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v, want an ErrInvalid mentioning %q", kv[0], kv[1], err, want)
		}
	}
}

func TestResourcesFromConfig(t *testing.T) {
	cfg := map[string]string{
		KeyCPU: "0.5", KeyCPUWeight: "300", KeyMemory: "64MiB", KeyProcesses: "40",
		KeyDiskRead: "20MB", KeyDiskWriteOps: "300iops", KeyDiskWeight: "200", "user.x": "y",
	}
	r, err := resourcesFromConfig(cfg, []string{"7:3", "254:0"})
	if err != nil {
		t.Fatal(err)
	}
	want := cgroups.Resources{CPUQuota: 0.5, CPUWeight: 300, MemoryMax: 64 << 20, PidsMax: 40, DiskWeight: 200,
		Devices: []cgroups.DeviceLimit{
			{Major: 7, Minor: 3, ReadBPS: 20e6, WriteIOPS: 300},
			{Major: 254, Minor: 0, ReadBPS: 20e6, WriteIOPS: 300},
		}}
	if r.CPUQuota != want.CPUQuota || r.CPUWeight != want.CPUWeight || r.MemoryMax != want.MemoryMax ||
		r.PidsMax != want.PidsMax || r.DiskWeight != want.DiskWeight || len(r.Devices) != 2 ||
		r.Devices[0] != want.Devices[0] || r.Devices[1] != want.Devices[1] {
		t.Errorf("got %+v\nwant %+v", r, want)
	}
	// No keys: no limits, but the devices are listed so old limits go.
	r, err = resourcesFromConfig(nil, []string{"7:3"})
	if err != nil || r.MemoryMax != 0 || len(r.Devices) != 1 || r.Devices[0].Limited() {
		t.Errorf("empty config: %+v, %v", r, err)
	}
	if !hasDiskLimits(map[string]string{KeyDiskWeight: "5"}) || hasDiskLimits(map[string]string{KeyMemory: "1G"}) {
		t.Errorf("hasDiskLimits")
	}
}
