package integration

import (
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
)

// TestMoveFailureNamesCause: the target fails while a copy-mode live move
// streams the memory of a container holding a few hundred MiB. The
// target's fault point fires at the first page file it receives, before
// reading it: the source is then mid-dump, blocked on that stream, with
// no timing involved. The move fails with an error whose first line says
// what the target did, in which phase, and that the container keeps
// running on the source, where it does run, with its memory intact; the
// target (back up after its crash) keeps nothing of it.
func TestMoveFailureNamesCause(t *testing.T) {
	c := newCluster(t)
	alpha, beta := c.Host("alpha"), c.Host("beta")
	memhog := buildMemhog(t)
	c.OK("launch", "busybox", "alpha:f1")
	alpha.StartMemhog("f1", memhog, 384)
	pid := instanceOn(t, c, "alpha:f1").PID

	for _, tc := range []struct {
		action string
		first  string // the error's first line
	}{
		// The target's daemon dies (SIGKILL): it went away.
		{"crash", "beta went away during the memory copy; f1 keeps running on alpha"},
		// The target reports an error and ends the session.
		{"fail", "beta failed the move during the memory copy; f1 keeps running on alpha"},
	} {
		beta.RestartWith("--fault", "migrate.target.recv-pages="+tc.action)
		r := c.Vessel("move", "alpha:f1", "beta:", "--live", "--memory", api.MemoryCopy)
		if r.Code == 0 {
			t.Fatalf("%s: move succeeded although the target failed", tc.action)
		}
		msg := strings.TrimPrefix(strings.TrimSpace(r.Stderr), "Error: ")
		t.Logf("%s: move error:\n%s", tc.action, msg)
		if first, _, _ := strings.Cut(msg, "\n"); first != tc.first {
			t.Errorf("%s: first line of the error %q, want %q", tc.action, first, tc.first)
		}
		if strings.Contains(msg, "RLIMIT_NOFILE") {
			t.Errorf("%s: the error quotes CRIU's harmless rlimit line", tc.action)
		}
		beta.RestartWith()

		inst := instanceOn(t, c, "alpha:f1")
		if inst.Status != api.StatusRunning || inst.PID != pid {
			t.Fatalf("%s: on alpha f1 is %s with init pid %d, want running with pid %d", tc.action, inst.Status, inst.PID, pid)
		}
		if got := alpha.VerifyMemhog("f1"); got != "ok" {
			t.Fatalf("%s: memhog's memory on alpha after the failed move: %s", tc.action, got)
		}
		if _, ok := listOn(t, c, "beta")["f1"]; ok {
			t.Fatalf("%s: beta lists f1 after the failed move", tc.action)
		}
		noLeftovers(t, c, "f1")
	}
}
