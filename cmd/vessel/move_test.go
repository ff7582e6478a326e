package main

import (
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
)

// TestTimingTableVM: a VM's move prints QEMU's phases, not CRIU's.
func TestTimingTableVM(t *testing.T) {
	got := timingTable(api.MigrationTiming{Mode: "live/auto", FrozenTotal: 0.06, Total: 1.2, VM: &api.VMMoveTiming{
		DiskMirror: 0.1, DiskBytes: 2 << 30, RAMPrecopy: 0.5, RAMIterations: 4, RAMBytes: 93 << 20,
		DowntimeQEMU: 0.037, Switchover: 0.023, PostcopyReason: "the guest dirties 900 Mbit/s, the link moves 300 Mbit/s",
		Postcopy: 0.2, PostcopyBytes: 80 << 20,
	}})
	for _, want := range []string{"Timing (live/auto):", "disk mirror (in sync):", "RAM pre-copy (4 passes):", "post-copy: the guest dirties",
		"downtime (QEMU):              0.037 s", "switch-over:", "total frozen:                 0.060 s", "post-copy (after resume):"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "suspend+dump") {
		t.Errorf("a VM's table shows CRIU's phases:\n%s", got)
	}
}
