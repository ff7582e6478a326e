package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
)

func TestMemoryMode(t *testing.T) {
	for _, tc := range []struct {
		anon            uint64
		known, uffd, wp bool
		want            string
	}{
		{0, true, true, true, api.MemoryCopy},
		{autoCopyMaxBytes, true, true, true, api.MemoryCopy},
		{autoCopyMaxBytes + 1, true, true, true, api.MemoryPrecopy}, // a trial: precopyVerdict
		{2 << 30, true, true, true, api.MemoryPrecopy},
		{autoCopyMaxBytes + 1, true, true, false, api.MemoryLazy}, // no write tracking: no pre-copy
		{2 << 30, true, true, false, api.MemoryLazy},
		{0, false, true, false, api.MemoryLazy},       // unknown: the freeze must not grow with memory
		{0, false, true, true, api.MemoryPrecopy},     // ... its trial measures it
		{2 << 30, true, false, false, api.MemoryCopy}, // no userfaultfd: neither pre- nor post-copy
		{0, false, false, false, api.MemoryCopy},
	} {
		if got := memoryMode(tc.anon, tc.known, tc.uffd, tc.wp); got != tc.want {
			t.Errorf("memoryMode(%d, known %v, userfaultfd %v, wp-async %v) = %s, want %s", tc.anon, tc.known, tc.uffd, tc.wp, got, tc.want)
		}
	}
}

func TestMemoryPassesDone(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		i       int
		n, prev int64
		want    bool
	}{
		{0, 2048 * mib, -1, false},
		{0, 3 * mib, -1, true}, // small at once (an idle container)
		{1, 245 * mib, 2048 * mib, false},
		{2, 63 * mib, 245 * mib, false},
		{3, 48 * mib, 63 * mib, true},                          // over 3/4 of the pass before: converged
		{3, 47 * mib, 63 * mib, false},                         // still shrinking
		{4, 7 * mib, 31 * mib, true},                           // small
		{4, 9 * mib, 7 * mib, false},                           // grew, but below the settled size: another pass
		{4, 30 * mib, 26 * mib, false},                         // the same
		{4, 33 * mib, 26 * mib, true},                          // grew past the settled size
		{4, 37 * mib, -1, false},                               // after a pass kept going by finalDumpSmall: not compared
		{2, 180 * mib, 120 * mib, false},                       // pass 2 spans pass 0's transfer: not compared
		{3, 300 * mib, 245 * mib, true},                        // growing
		{precopyMemMaxPasses - 1, 100 * mib, 1000 * mib, true}, // the limit
		{precopyMemMaxPasses - 2, 100 * mib, 1000 * mib, false},
	} {
		if got := memoryPassesDone(tc.i, tc.n, tc.prev); got != tc.want {
			t.Errorf("memoryPassesDone(%d, %d MiB, %d MiB) = %v, want %v", tc.i, tc.n/mib, tc.prev/mib, got, tc.want)
		}
	}
}

func TestFinalDumpSmall(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		rate  float64
		since time.Duration
		want  bool
	}{
		{43 * mib, 450 * time.Millisecond, false}, // a 2 MiB pass after a 126 MiB one, sent meanwhile
		{43 * mib, 100 * time.Millisecond, true},
		{64 * mib, 125 * time.Millisecond, false}, // 8 MiB: not under the mark
		{0, time.Second, true},                    // nothing written
	} {
		if got := finalDumpSmall(tc.rate, tc.since); got != tc.want {
			t.Errorf("finalDumpSmall(%.0f MiB/s, %s) = %v, want %v", tc.rate/mib, tc.since, got, tc.want)
		}
	}
}

func TestPrecopyVerdict(t *testing.T) {
	const mib = 1 << 20
	pass := func(b int64, s, send float64) api.MemoryPass {
		return api.MemoryPass{Bytes: b, Pages: b / pageSize, Seconds: s, SendSeconds: send}
	}
	for _, tc := range []struct {
		name   string
		passes []api.MemoryPass
		want   bool
		says   string
	}{
		{"one small pass", []api.MemoryPass{pass(3*mib, 0.05, 0.01)}, true, "converged"},
		// 2 GiB at 64 MiB/s: pass 0 of 2049 MiB in 3 s, sent in 4.5 s;
		// pass 1 of 245 MiB in 0.5 s. Converges, but pre-copy's freeze
		// grows with 2 GiB more than post-copy's (bench/migrate: 195
		// against 169 ms).
		{"2 GiB at 64 MiB/s", []api.MemoryPass{pass(2049*mib, 3, 4.5), pass(245*mib, 0.5, 0.6)}, false, "post-copy:"},
		// 256 MiB written slowly: pre-copy's freeze is the shorter.
		{"256 MiB at 8 MiB/s", []api.MemoryPass{pass(256*mib, 0.4, 0.6), pass(3*mib, 0.1, 0.01)}, true, "pre-copy:"},
		// The same memory rewritten at ~400 MiB/s: no convergence.
		{"dirtier than the link", []api.MemoryPass{pass(2049*mib, 3, 4.5), pass(1200*mib, 2, 2.5)}, false, "would not converge"},
		// 64 MiB rewritten fast, a slow fixed cost per pass: the final
		// dump would copy more than post-copy's freeze costs.
		{"small memory, slow passes", []api.MemoryPass{pass(64*mib, 0.2, 0.1), pass(10*mib, 0.4, 0.05)}, false, "post-copy:"},
		{"no timing", []api.MemoryPass{pass(0, 0, 0), pass(1, 0, 0)}, true, "converged"},
	} {
		ok, why := precopyVerdict(tc.passes)
		if ok != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("%s: precopyVerdict = %v %q, want %v with %q", tc.name, ok, why, tc.want, tc.says)
		}
		t.Logf("%s: %s", tc.name, why)
	}
}
