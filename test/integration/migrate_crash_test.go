package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// TestMigrationDaemonCrash kills a daemon (SIGKILL) in the middle of a live
// move, at each end. When it comes back it settles the move from its
// journal: the container runs in exactly one place, with its memory, disk
// and TCP connection intact, and neither host keeps transfer leftovers.
func TestMigrationDaemonCrash(t *testing.T) {
	c := newCluster(t)
	alpha, beta := c.Host("alpha"), c.Host("beta")
	c.OK("launch", "busybox", "alpha:k1")
	w := startWorkload(t, c, "alpha:k1")
	pid := instanceOn(t, c, "alpha:k1").PID

	// The source dies with the container checkpointed and frozen (a lazy
	// dump's page server still holding its processes, or a full dump):
	// back up, it resumes the container where it was.
	for _, mode := range []string{api.MemoryLazy, api.MemoryCopy} {
		alpha.RestartWith("--fault", "migrate.source.frozen=crash")
		if r := c.Vessel("move", "alpha:k1", "beta:", "--live", "--memory", mode); r.Code == 0 {
			t.Fatalf("move (%s) succeeded although the source crashed", mode)
		}
		alpha.RestartWith()
		settled(t, c, "alpha:k1", api.StatusRunning)
		if p := instanceOn(t, c, "alpha:k1").PID; p != pid {
			t.Fatalf("source crash (%s): init pid %d, was %d", mode, p, pid)
		}
		w.check("alpha:k1")
		noLeftovers(t, c, "k1")
		if _, ok := listOn(t, c, "beta")["k1"]; ok {
			t.Fatalf("source crash (%s): the target lists k1", mode)
		}
	}

	// The target dies before it restores: the source cannot tell whether
	// the container runs there, so it keeps it frozen and asks until the
	// target is back, which deletes its half-received copy; then the
	// container resumes on the source.
	beta.RestartWith("--fault", "migrate.target.before-restore=crash")
	r := c.Vessel("move", "alpha:k1", "beta:", "--live", "--memory", api.MemoryCopy)
	if r.Code == 0 {
		t.Fatal("move succeeded although the target crashed")
	}
	t.Logf("target crash: %s", strings.TrimSpace(r.Stderr))
	beta.RestartWith()
	settled(t, c, "alpha:k1", api.StatusRunning)
	w.check("alpha:k1")
	noLeftovers(t, c, "k1")
	if _, ok := listOn(t, c, "beta")["k1"]; ok {
		t.Fatal("target crash: the target still lists k1")
	}

	// The source dies right after telling the target to start the
	// container: the target runs it, so the source drops its copy.
	alpha.RestartWith("--fault", "migrate.source.started=crash")
	if r := c.Vessel("move", "alpha:k1", "beta:", "--live", "--memory", api.MemoryCopy); r.Code == 0 {
		t.Fatal("move succeeded although the source crashed")
	}
	alpha.RestartWith()
	settled(t, c, "beta:k1", api.StatusRunning)
	eventuallyWithin(t, time.Minute, "the source to drop its copy", func() bool {
		_, ok := listOn(t, c, "alpha")["k1"]
		return !ok
	})
	w.check("beta:k1")
	noLeftovers(t, c, "k1")
}

// settled waits until ref is no longer busy with a migration and has the
// status want.
func settled(t *testing.T, c *testhost.Cluster, ref, want string) {
	t.Helper()
	eventuallyWithin(t, 2*time.Minute, ref+" to settle as "+want, func() bool {
		return c.Vessel("info", ref, "--format", "json").Code == 0 && instanceOn(t, c, ref).Status == want
	})
}

// noLeftovers checks that no host keeps a migration journal or transfer
// snapshot of name.
func noLeftovers(t *testing.T, c *testhost.Cluster, name string) {
	t.Helper()
	for _, h := range c.Hosts {
		if inst, ok := listOn(t, c, h.Name())[name]; ok {
			if got := instanceOn(t, c, h.Name()+":"+inst.Name); got.Migration != nil {
				t.Fatalf("%s keeps the journal of a migration of %s: %+v", h.Name(), name, *got.Migration)
			}
		}
		for _, pattern := range []string{
			filepath.Join(h.Root(), "migrations", name+".json*"),
			filepath.Join(h.Root(), "storage-pools/default/snapshots", name, ".migrate-*"),
		} {
			left, _ := filepath.Glob(pattern)
			if len(left) != 0 {
				t.Fatalf("%s keeps %v", h.Name(), left)
			}
		}
		if _, err := os.Stat(filepath.Join(h.RunDir(), "migrate", name)); err == nil {
			t.Fatalf("%s keeps the migration directory of %s", h.Name(), name)
		}
		// A restore's root bound for CRIU (PrepareRoot) holds the volume.
		if _, err := os.Stat(filepath.Join(h.RunDir(), "shims", name, "criu-root")); err == nil {
			t.Fatalf("%s keeps CRIU's root of %s bound", h.Name(), name)
		}
	}
}
