package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

func buildMemtick(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "memtick")
	if err := testhost.BuildMemtick(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// servingHTTPS waits until host's API answers over HTTPS (a restarted
// daemon answers on its unix socket a moment before).
func servingHTTPS(t *testing.T, c *testhost.Cluster, host string) {
	t.Helper()
	eventually(t, host+" serving HTTPS", func() bool { return c.Vessel("list", host+":").Code == 0 })
}

// moveTiming moves ref live to host to in memory mode mode and returns
// the move's report.
func moveTiming(t *testing.T, c *testhost.Cluster, ref, to, mode string) api.MigrationTiming {
	t.Helper()
	out := c.OK("move", ref, to+":", "--live", "--memory", mode, "--format", "json")
	var tm api.MigrationTiming
	if err := json.Unmarshal([]byte(out), &tm); err != nil {
		t.Fatalf("move %s: timing JSON: %v\n%s", ref, err, out)
	}
	return tm
}

// TestLiveMigrationPrecopy moves a busy container back and forth with
// --memory=precopy: a workload rewriting 128 MiB of memory (memtick: every
// word is checked against the instant its sweep says, after each move),
// the counter, log and TCP connection of the other round trips. Each move
// takes at least two memory passes (the first holds all memory, and the
// rewriting leaves more than a small pass behind); the final dump holds
// only what the last pass left, the rest restored from the passes on the
// target; and the source keeps nothing (the move commits, nothing is
// served after the resume). Then a move through the fault point in the
// pass loop (the target fails or vanishes while the source runs its third
// pass): the container keeps running on the source with its memory
// intact, and a next move goes through.
func TestLiveMigrationPrecopy(t *testing.T) {
	c := newCluster(t)
	memtick := buildMemtick(t)
	c.OK("launch", "busybox", "alpha:p1")
	addr := instanceOn(t, c, "alpha:p1").IPv4
	w := startWorkload(t, c, "alpha:p1")
	c.Host("alpha").StartMemtick("p1", memtick, 128, 64)
	hosts := []string{"alpha", "beta"}
	for i := 0; i < 6; i++ {
		from, to := hosts[i%2], hosts[(i+1)%2]
		tm := moveTiming(t, c, from+":p1", to, api.MemoryPrecopy)
		t.Logf("move %d %s->%s: frozen %.3fs total %.3fs, passes %+v, final dump %d bytes", i, from, to,
			tm.FrozenTotal, tm.Total, tm.MemoryPasses, tm.DumpBytes)
		if tm.Mode != "live/"+api.MemoryPrecopy || len(tm.MemoryPasses) < 2 || tm.Postcopy != 0 {
			t.Fatalf("move %d: not a pre-copy move: %+v", i, tm)
		}
		if first := tm.MemoryPasses[0].Bytes; first < 64<<20 || tm.DumpBytes >= first {
			t.Errorf("move %d: first pass %d bytes, final dump %d: the final dump is not incremental", i, first, tm.DumpBytes)
		}
		if _, still := listOn(t, c, from)["p1"]; still {
			t.Fatalf("move %d: p1 still on %s", i, from)
		}
		inst := listOn(t, c, to)["p1"]
		if inst.Status != api.StatusRunning || inst.IPv4 != addr {
			t.Fatalf("move %d: p1 on %s: %+v", i, to, inst)
		}
		w.check(to + ":p1")
		if got := c.Host(to).VerifyMemtick("p1"); got != "ok" {
			t.Fatalf("move %d: memtick's memory on %s: %s", i, to, got)
		}
	}
	noLeftovers(t, c, "p1")

	// The fault point in the pass loop. p1 is on alpha again.
	alpha, beta := c.Host("alpha"), c.Host("beta")
	pid := instanceOn(t, c, "alpha:p1").PID
	for _, action := range []string{"fail", "cut", "crash"} {
		beta.RestartWith("--fault", "migrate.target.recv-memory-pass="+action)
		servingHTTPS(t, c, "beta")
		r := c.Vessel("move", "alpha:p1", "beta:", "--live", "--memory", api.MemoryPrecopy)
		if r.Code == 0 {
			t.Fatalf("%s: move succeeded although the target failed in the memory passes", action)
		}
		msg := strings.TrimPrefix(strings.TrimSpace(r.Stderr), "Error: ")
		t.Logf("%s: %s", action, msg)
		if first, _, _ := strings.Cut(msg, "\n"); !strings.Contains(first, "during the memory pre-copy; p1 keeps running on alpha") {
			t.Errorf("%s: first line of the error %q", action, first)
		}
		beta.RestartWith()
		inst := instanceOn(t, c, "alpha:p1")
		if inst.Status != api.StatusRunning || inst.PID != pid {
			t.Fatalf("%s: on alpha p1 is %s with pid %d, want running with pid %d", action, inst.Status, inst.PID, pid)
		}
		w.check("alpha:p1")
		if got := alpha.VerifyMemtick("p1"); got != "ok" {
			t.Fatalf("%s: memtick's memory on alpha after the failed move: %s", action, got)
		}
		if _, ok := listOn(t, c, "beta")["p1"]; ok {
			t.Fatalf("%s: beta lists p1 after the failed move", action)
		}
		noLeftovers(t, c, "p1")
	}
	// And the passes work again: the tracking of the failed move is gone.
	servingHTTPS(t, c, "beta")
	tm := moveTiming(t, c, "alpha:p1", "beta", api.MemoryPrecopy)
	if len(tm.MemoryPasses) < 2 {
		t.Fatalf("move after the faults: %+v", tm)
	}
	w.check("beta:p1")
	if got := beta.VerifyMemtick("p1"); got != "ok" {
		t.Fatalf("memtick's memory on beta: %s", got)
	}
}

// TestLiveMigrationAutoPrecopy: --memory=auto on a container with more
// than a few MiB starts pre-copy and keeps it where it measures that it
// beats post-copy (the report says why); forced to drop it (the fault
// point of its verdict), the same session moves post-copy instead, the
// target having thrown away the passes and prepared a lazy restore.
func TestLiveMigrationAutoPrecopy(t *testing.T) {
	c := newCluster(t)
	memtick := buildMemtick(t)
	c.OK("launch", "busybox", "alpha:a1")
	w := startWorkload(t, c, "alpha:a1")
	c.Host("alpha").StartMemtick("a1", memtick, 64, 16)

	tm := moveTiming(t, c, "alpha:a1", "beta", api.MemoryAuto)
	t.Logf("auto: %s, passes %+v: %s", tm.Mode, tm.MemoryPasses, tm.AutoChoice)
	if len(tm.MemoryPasses) == 0 || tm.AutoChoice == "" {
		t.Fatalf("auto did not try pre-copy: %+v", tm)
	}
	if want := map[bool]string{true: "live/precopy", false: "live/lazy"}[strings.HasPrefix(tm.AutoChoice, "pre-copy")]; tm.Mode != want {
		t.Fatalf("auto chose %q but moved %s", tm.AutoChoice, tm.Mode)
	}
	w.check("beta:a1")
	if got := c.Host("beta").VerifyMemtick("a1"); got != "ok" {
		t.Fatalf("memtick's memory on beta: %s", got)
	}

	beta := c.Host("beta")
	beta.RestartWith("--fault", "migrate.source.precopy-verdict=fail")
	servingHTTPS(t, c, "beta")
	tm = moveTiming(t, c, "beta:a1", "alpha", api.MemoryAuto)
	t.Logf("auto, verdict forced: %s, passes %+v: %s", tm.Mode, tm.MemoryPasses, tm.AutoChoice)
	if tm.Mode != "live/"+api.MemoryLazy || len(tm.MemoryPasses) == 0 || tm.PostcopyBytes == 0 {
		t.Fatalf("the dropped pre-copy did not move post-copy: %+v", tm)
	}
	beta.RestartWith()
	w.check("alpha:a1")
	if got := c.Host("alpha").VerifyMemtick("a1"); got != "ok" {
		t.Fatalf("memtick's memory on alpha: %s", got)
	}
	noLeftovers(t, c, "a1")
}
