package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
)

func TestDeriveDefaultLimits(t *testing.T) {
	for _, c := range []struct {
		mem    uint64
		pidMax int64
		procs  string
		memory string
	}{
		// 24 GiB, Debian's pid_max: a quarter of the PIDs, 10% reserve.
		{24 << 30, 32768, "8192", "22118MiB"},
		// A big host: 10000 tasks at most.
		{256 << 30, 4194304, "10000", "235929MiB"},
		// A small host: the reserve is at least 256 MiB.
		{1 << 30, 32768, "8192", "768MiB"},
		// Tiny: never below what init needs, never fewer than 64 tasks.
		{128 << 20, 100, "64", "4MiB"},
	} {
		got := deriveDefaultLimits(c.mem, c.pidMax)
		if got[KeyProcesses] != c.procs || got[KeyMemory] != c.memory {
			t.Errorf("deriveDefaultLimits(%d MiB, %d) = %v, want processes %s, memory %s", c.mem>>20, c.pidMax, got, c.procs, c.memory)
		}
		if err := validateConfig(got); err != nil {
			t.Errorf("derived defaults do not validate: %v", err)
		}
	}
}

func TestEffectiveDefaultLimits(t *testing.T) {
	host, err := hostDefaultLimits()
	if err != nil {
		t.Fatal(err)
	}
	got, err := effectiveDefaultLimits(map[string]string{KeyMemory: "2GiB", KeyCPU: "2"})
	if err != nil || got[KeyMemory] != "2GiB" || got[KeyCPU] != "2" || got[KeyProcesses] != host[KeyProcesses] {
		t.Errorf("configured over derived: %v, %v", got, err)
	}
	got, err = effectiveDefaultLimits(map[string]string{KeyMemory: Unlimited, KeyProcesses: ""})
	if _, has := got[KeyProcesses]; err != nil || got[KeyMemory] != Unlimited || has {
		t.Errorf("unlimited and dropped defaults: %v, %v", got, err)
	}
	for kv, want := range map[[2]string]string{
		{KeyMemory, "lots"}:   "not a size",
		{"user.note", "x"}:    "only limits.* keys",
		{"limits.bogus", "1"}: "unknown configuration key",
	} {
		if _, err := effectiveDefaultLimits(map[string]string{kv[0]: kv[1]}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("default %s=%s: %v, want ErrInvalid mentioning %q", kv[0], kv[1], err, want)
		}
	}
}

// TestDefaultLimitsApplied: an instance that sets no limits starts with the
// daemon's defaults written to its cgroup; a value it sets wins, and
// "unlimited" lifts the default. The API shows the defaults that apply.
func TestDefaultLimitsApplied(t *testing.T) {
	td := newTestDaemon(t)
	td.cfg.DefaultLimits = map[string]string{KeyProcesses: "500", KeyMemory: "1GiB"}
	ctx := context.Background()
	for name, c := range map[string]struct {
		config        map[string]string
		pids, memory  int64
		shownDefaults string
	}{
		"plain":     {nil, 500, 1 << 30, "limits.memory=1GiB limits.processes=500"},
		"own":       {map[string]string{KeyProcesses: "40"}, 40, 1 << 30, "limits.memory=1GiB"},
		"unlimited": {map[string]string{KeyMemory: Unlimited}, 500, 0, "limits.processes=500"},
	} {
		td.addInstance(t, name, state.StateStopped, func(r *state.Instance) { r.Config = c.config })
		op, err := td.ChangeState(ctx, name, api.InstanceStatePut{Action: api.ActionStart})
		if err != nil {
			t.Fatal(err)
		}
		if err := waitOp(t, op); err != nil {
			t.Fatalf("%s: start: %v", name, err)
		}
		sets := td.cgroup(name).sets
		if len(sets) == 0 {
			t.Fatalf("%s: no limits written", name)
		}
		for i, r := range sets {
			if r.PidsMax != c.pids || r.MemoryMax != c.memory {
				t.Errorf("%s: write %d: pids %d, memory %d; want %d, %d", name, i, r.PidsMax, r.MemoryMax, c.pids, c.memory)
			}
		}
		inst, err := td.GetInstance(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var shown []string
		for _, k := range []string{KeyMemory, KeyProcesses} {
			if v, ok := inst.Defaults[k]; ok {
				shown = append(shown, k+"="+v)
			}
		}
		if got := strings.Join(shown, " "); got != c.shownDefaults {
			t.Errorf("%s: defaults shown %q, want %q", name, got, c.shownDefaults)
		}
	}
}
