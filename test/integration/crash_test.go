package integration

import (
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
)

// The daemon is killed (SIGKILL, fault point "crash") in each window
// between two steps of an action where its state is split between the
// runtime, the pool and the state store. When it comes back, reconcile
// settles the difference: the container ends running in exactly one
// place, with its network, and nothing is left half done.

// TestCrashAfterLaunch: killed after runc made the container's processes,
// before the start was recorded. The restarted daemon adopts the running
// container (it used to take it for the leftovers of a failed start and
// cut its network).
func TestCrashAfterLaunch(t *testing.T) {
	h := newHost(t)
	h.OK("create", "busybox", "s1")
	h.RestartWith("--fault", "instance.start.launched=crash")
	if r := h.Vessel("start", "s1"); r.Code == 0 {
		t.Fatal("start succeeded although the daemon was killed")
	}
	h.RestartWith()
	inst := h.Instance("s1")
	if inst.Status != api.StatusRunning || inst.PID == 0 {
		t.Fatalf("after the restart: %s, pid %d; want Running", inst.Status, inst.PID)
	}
	h.assertNetwork("s1", inst.IPv4)
	// It is an ordinary running container again: it stops and starts.
	h.OK("stop", "--force", "s1")
	h.OK("start", "s1")
	h.assertNetwork("s1", h.Instance("s1").IPv4)
	h.OK("delete", "--force", "s1")
	h.assertNoInstanceTraces("s1")
}

// TestCrashDuringCreate: killed after the create made the container's
// volume, before it recorded the instance as complete. The restarted
// daemon undoes the create; the name is free again.
func TestCrashDuringCreate(t *testing.T) {
	h := newHost(t)
	h.RestartWith("--fault", "instance.create.volume=crash")
	if r := h.Vessel("launch", "busybox", "c1"); r.Code == 0 {
		t.Fatal("launch succeeded although the daemon was killed")
	}
	h.RestartWith()
	if _, ok := h.instances()["c1"]; ok {
		t.Fatal("the half-created instance is listed")
	}
	h.assertNoInstanceTraces("c1")
	h.OK("launch", "busybox", "c1")
	h.assertNetwork("c1", h.Instance("c1").IPv4)
	h.OK("delete", "--force", "c1")
}

// TestCrashDuringSnapshotRestore: killed after a snapshot restore deleted
// the container's disk, before it cloned the snapshot in its place. The
// restarted daemon finishes the rollback: the container has the
// snapshot's disk and starts.
func TestCrashDuringSnapshotRestore(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "r1")
	h.OK("exec", "r1", "--", "sh", "-c", "echo before > /root/mark")
	h.OK("snapshot", "create", "r1", "s0")
	h.OK("exec", "r1", "--", "sh", "-c", "echo after > /root/mark")
	h.RestartWith("--fault", "snapshot.restore.deleted=crash")
	if r := h.Vessel("snapshot", "restore", "r1", "s0", "--force"); r.Code == 0 {
		t.Fatal("restore succeeded although the daemon was killed")
	}
	h.RestartWith()
	if st := h.Instance("r1").Status; st != api.StatusStopped {
		t.Fatalf("after the restart r1 is %s, want Stopped (the restore stopped it)", st)
	}
	h.OK("start", "r1")
	if got := strings.TrimSpace(h.read("r1", "/root/mark")); got != "before" {
		t.Fatalf("disk after the finished rollback: %q, want the snapshot's", got)
	}
	h.assertNetwork("r1", h.Instance("r1").IPv4)
	h.OK("delete", "--force", "r1")
	h.assertNoInstanceTraces("r1")
}

// TestCrashDuringStatefulSnapshotRestore: the same crash in a stateful
// restore, whose shim and CRIU are started beside the rollback. The
// restarted daemon finishes the rollback, the half-prepared restore
// leaves nothing that blocks the next one (CRIU exits on the dead
// daemon's hang-up, its shim after it), and a stateful restore then
// brings the processes back.
func TestCrashDuringStatefulSnapshotRestore(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "r2")
	h.OK("exec", "r2", "--", "sh", "-c", "echo before > /root/mark")
	h.startCounter("r2")
	h.OK("snapshot", "create", "r2", "s0", "--stateful")
	h.OK("exec", "r2", "--", "sh", "-c", "echo after > /root/mark")
	h.RestartWith("--fault", "snapshot.restore.deleted=crash")
	if r := h.Vessel("snapshot", "restore", "r2", "s0", "--stateful", "--force"); r.Code == 0 {
		t.Fatal("restore succeeded although the daemon was killed")
	}
	h.RestartWith()
	if st := h.Instance("r2").Status; st != api.StatusStopped {
		t.Fatalf("after the restart r2 is %s, want Stopped (the restore stopped it)", st)
	}
	h.OK("snapshot", "restore", "r2", "s0", "--stateful")
	if got := strings.TrimSpace(h.read("r2", "/root/mark")); got != "before" {
		t.Fatalf("disk after the restore: %q, want the snapshot's", got)
	}
	after := h.count("r2")
	eventually(t, "the restored counter to count", func() bool { return h.count("r2") > after })
	h.assertNetwork("r2", h.Instance("r2").IPv4)
	h.OK("delete", "--force", "r2")
	h.assertNoInstanceTraces("r2")
}

// TestCrashTargetAfterReserve: the target is killed right after it
// reserved the name (its record and the migration journal, committed
// together). The source resumes the container; the restarted target
// finds the journal and deletes the half-received instance, so no orphan
// record blocks the name.
func TestCrashTargetAfterReserve(t *testing.T) {
	c := newCluster(t)
	beta := c.Host("beta")
	c.OK("launch", "busybox", "alpha:m1")
	w := startWorkload(t, c, "alpha:m1")
	pid := instanceOn(t, c, "alpha:m1").PID

	beta.RestartWith("--fault", "migrate.target.reserved=crash")
	if r := c.Vessel("move", "alpha:m1", "beta:", "--live"); r.Code == 0 {
		t.Fatal("move succeeded although the target was killed")
	}
	settled(t, c, "alpha:m1", api.StatusRunning)
	if p := instanceOn(t, c, "alpha:m1").PID; p != pid {
		t.Fatalf("the source's init pid is %d, was %d", p, pid)
	}
	w.check("alpha:m1")
	beta.RestartWith()
	eventually(t, "beta to drop the half-received instance", func() bool {
		_, ok := listOn(t, c, "beta")["m1"]
		return !ok
	})
	noLeftovers(t, c, "m1")
	// Nothing blocks a second attempt.
	c.OK("move", "alpha:m1", "beta:", "--live")
	w.check("beta:m1")
}

// assertNetwork checks that a container has its address and reaches the
// host's bridge.
func (h *host) assertNetwork(name, ipv4 string) {
	h.t.Helper()
	if ipv4 == "" {
		h.t.Fatalf("%s has no address", name)
	}
	addrs := h.OK("exec", name, "--", "ip", "-4", "addr", "show", "eth0")
	if !strings.Contains(addrs, ipv4+"/") {
		h.t.Fatalf("%s's eth0 lacks %s:\n%s", name, ipv4, addrs)
	}
	gw := h.Subnet().Addr().Next().String()
	if r := h.Ping(name, gw); r.Code != 0 {
		h.t.Fatalf("%s cannot reach the bridge %s: %s", name, gw, r)
	}
}
