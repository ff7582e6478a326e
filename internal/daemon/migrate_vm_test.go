package daemon

import (
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu"
)

func TestVMPostcopyVerdict(t *testing.T) {
	ram := func(syncs, dirtyPages int64, mbps float64) qemu.MigrationStatus {
		return qemu.MigrationStatus{Status: "active", RAM: &qemu.RAMStats{DirtySyncCount: syncs, DirtyPagesRate: dirtyPages, Mbps: mbps, PageSize: 4096}}
	}
	for _, tc := range []struct {
		name   string
		memory string
		s      qemu.MigrationStatus
		post   bool
	}{
		{"copy never switches", api.MemoryCopy, ram(10, 1e6, 1), false},
		{"lazy switches at once", api.MemoryLazy, qemu.MigrationStatus{Status: "active"}, true},
		{"auto: no stats yet", api.MemoryAuto, qemu.MigrationStatus{Status: "active"}, false},
		{"auto: first pass still running", api.MemoryAuto, ram(1, 1e6, 100), false},
		{"auto: no link rate yet", api.MemoryAuto, ram(3, 1e6, 0), false},
		// 10000 pages/s of 4 KiB = 327.68 Mbit/s.
		{"auto: dirtying slower than the link", api.MemoryAuto, ram(2, 10000, 400), false},
		{"auto: dirtying faster than the link", api.MemoryAuto, ram(2, 10000, 300), true},
		{"auto: page size unknown counts 4 KiB", api.MemoryAuto, qemu.MigrationStatus{RAM: &qemu.RAMStats{DirtySyncCount: 2, DirtyPagesRate: 10000, Mbps: 300}}, true},
	} {
		if got := vmPostcopyVerdict(tc.memory, tc.s); (got != "") != tc.post {
			t.Errorf("%s: verdict %q, want switch=%v", tc.name, got, tc.post)
		}
	}
}

func TestVMMigrateCapabilities(t *testing.T) {
	for memory, post := range map[string]bool{api.MemoryCopy: false, api.MemoryLazy: true, api.MemoryAuto: true} {
		caps := vmMigrateCapabilities(memory)
		if got := caps["postcopy-ram"]; got != post {
			t.Errorf("%s: postcopy-ram %v, want %v", memory, got, post)
		}
		// The source wakes on MIGRATION events (WatchMigration).
		if !caps[qemu.EventsCapability] {
			t.Errorf("%s: no MIGRATION events", memory)
		}
	}
}
