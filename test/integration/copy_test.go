package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// snapshotCount reads the counter (startCounter) a snapshot's disk holds.
func snapshotCount(t *testing.T, pool, name, snap string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pool, "snapshots", name, snap, "root", "count"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("count in %s/%s: %q", name, snap, b)
	}
	return n
}

// subvolumeField returns a field of `btrfs subvolume show PATH` ("UUID",
// "Parent UUID").
func subvolumeField(t *testing.T, path, field string) string {
	t.Helper()
	out, err := exec.Command("btrfs", "subvolume", "show", path).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs subvolume show %s: %v\n%s", path, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %q in btrfs subvolume show %s:\n%s", field, path, out)
	return ""
}

// sourceMachineID is the machine ID the tests' sources write themselves
// (busybox has no systemd to make one).
const sourceMachineID = "0123456789abcdef0123456789abcdef\n"

// identity is what a container says of itself: its hostname (its UTS
// namespace's), /etc/hostname, its /etc/hosts line for itself and
// /etc/machine-id.
func identity(t *testing.T, exec func(args ...string) string, ref string) string {
	t.Helper()
	return exec("exec", ref, "--", "sh", "-c", "hostname; cat /etc/hostname; grep '^127.0.1.1' /etc/hosts; cat /etc/machine-id")
}

// identityOf is identity's expectation for a container named name with
// machine ID id ("" for an empty /etc/machine-id).
func identityOf(name, id string) string {
	return name + "\n" + name + "\n127.0.1.1\t" + name + "\n" + id
}

// TestCopyWithSnapshots: a local copy of a container (btrfs) gets its
// snapshots, each a read-only snapshot of the source's (constant time);
// they outlive the source, a disk snapshot of the copy restores, and a
// stateful one brings the counter back in the copy's own user namespace
// and address. --instance-only and a copy of a snapshot get none. The
// snapshots hold the source's identity: restored in the copy, both give
// it its own (hostname, hosts, an empty machine ID; after the stateful
// one its UTS name too); restored in the source, its own stays.
func TestCopyWithSnapshots(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	h.OK("exec", "c1", "--", "sh", "-c", "printf '"+sourceMachineID+"' > /etc/machine-id")
	h.OK("exec", "c1", "--", "sh", "-c", "echo one > /root/v")
	h.OK("snapshot", "create", "c1", "first")
	h.startCounter("c1")
	h.OK("exec", "c1", "--", "sh", "-c", "echo two > /root/v")
	h.OK("snapshot", "create", "c1", "second", "--stateful")
	atSnap := snapshotCount(t, h.PoolPath(), "c1", "second")
	h.OK("exec", "c1", "--", "sh", "-c", "echo three > /root/v")
	eventually(t, "the counter to move well past the snapshot", func() bool { return h.count("c1") > atSnap+100 })
	beforeStop := h.count("c1")
	srcMap := h.OK("exec", "c1", "--", "cat", "/proc/1/uid_map")
	h.OK("stop", "--force", "c1")

	h.OK("copy", "c1", "c2")
	snaps := h.snapshots("c2")
	if len(snaps) != 2 || snaps["first"].Stateful || !snaps["second"].Stateful || snaps["second"].MemoryBytes == 0 {
		t.Fatalf("the copy's snapshots: %+v", snaps)
	}
	for _, s := range []string{"first", "second"} {
		cp := filepath.Join(h.PoolPath(), "snapshots", "c2", s)
		if parent, src := subvolumeField(t, cp, "Parent UUID"), subvolumeField(t, filepath.Join(h.PoolPath(), "snapshots", "c1", s), "UUID"); parent != src {
			t.Errorf("c2/%s is not a snapshot of c1/%s: parent %s, source %s", s, s, parent, src)
		}
		if err := os.WriteFile(filepath.Join(cp, "root", "x"), nil, 0o644); err == nil {
			t.Errorf("c2/%s is writable", s)
		}
	}
	h.OK("copy", "c1", "c3", "--instance-only")
	h.OK("copy", "c1/second", "c4")
	for _, name := range []string{"c3", "c4"} {
		if snaps := h.snapshots(name); len(snaps) != 0 {
			t.Errorf("%s has snapshots %+v", name, snaps)
		}
		if _, err := os.Lstat(filepath.Join(h.PoolPath(), "snapshots", name)); err == nil {
			t.Errorf("%s has a snapshot directory", name)
		}
	}

	// The source restoring its own snapshots keeps its own identity.
	h.OK("snapshot", "restore", "c1", "first")
	h.OK("start", "c1")
	if got := identity(t, h.OK, "c1"); got != identityOf("c1", sourceMachineID) {
		t.Errorf("the source after restoring first:\n%s", got)
	}
	h.OK("snapshot", "restore", "c1", "second", "--stateful", "--force")
	if got := identity(t, h.OK, "c1"); got != identityOf("c1", sourceMachineID) {
		t.Errorf("the source after restoring second (stateful):\n%s", got)
	}
	h.OK("stop", "--force", "c1")

	// The source goes, snapshots and all; the copy's stay and restore.
	h.OK("delete", "c1")
	h.assertNoSnapshotTraces("c1", "second")
	h.OK("start", "c2")
	copyMap := h.OK("exec", "c2", "--", "cat", "/proc/1/uid_map")
	if copyMap == srcMap {
		t.Fatalf("the copy runs in the source's id block: %q", copyMap)
	}
	if got := h.read("c2", "/root/v"); got != "three\n" {
		t.Errorf("the copy's disk: %q", got)
	}
	h.OK("snapshot", "restore", "c2", "first", "--force")
	if got := h.read("c2", "/root/v"); got != "one\n" {
		t.Errorf("the copy after restoring first: %q", got)
	}
	if got := identity(t, h.OK, "c2"); got != identityOf("c2", "") {
		t.Errorf("the copy after restoring first:\n%s", got)
	}
	h.OK("snapshot", "restore", "c2", "second", "--stateful", "--force")
	if got := identity(t, h.OK, "c2"); got != identityOf("c2", "") {
		t.Errorf("the copy after restoring second (stateful):\n%s", got)
	}
	after := h.count("c2")
	if after < atSnap || after >= beforeStop {
		t.Errorf("counter after the copy's stateful restore = %d, want it to go on from %d (below %d)", after, atSnap, beforeStop)
	}
	eventually(t, "the restored counter to count", func() bool { return h.count("c2") > after })
	if got := h.OK("exec", "c2", "--", "cat", "/proc/1/uid_map"); got != copyMap {
		t.Errorf("restored into id map %q, the copy's is %q", got, copyMap)
	}
	// Its root writes its disk (the restored tasks' ids are the idmapped
	// rootfs's) and it has its own address.
	h.OK("exec", "c2", "--", "sh", "-c", "echo written > /root/w")
	if got := h.read("c2", "/root/v"); got != "two\n" {
		t.Errorf("the copy after its stateful restore: %q", got)
	}
	ip := h.instances()["c2"].IPv4
	if got := h.OK("exec", "c2", "--", "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, ip+"/") {
		t.Errorf("eth0 after the stateful restore (the copy's address is %s):\n%s", ip, got)
	}
	h.OK("delete", "--force", "c2")
	h.assertNoSnapshotTraces("c2", "second")
}

// TestCopyFailureLeavesNothing: a local copy that fails while it copies
// the snapshots leaves nothing of the copy (the host's teardown checks
// mounts and the rest); the source keeps its snapshots.
func TestCopyFailureLeavesNothing(t *testing.T) {
	h := &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: []string{"--fault", "instance.copy.snapshot=fail"}}), t: t}
	h.OK("create", "busybox", "c1")
	h.OK("snapshot", "create", "c1", "s1")
	h.Fails("instance.copy.snapshot", "copy", "c1", "c2")
	if _, ok := h.instances()["c2"]; ok {
		t.Fatal("the failed copy is listed")
	}
	h.assertNoInstanceTraces("c2")
	h.assertNoSnapshotTraces("c2", "s1")
	if _, err := os.Lstat(filepath.Join(h.PoolPath(), "snapshots", "c2")); err == nil {
		t.Error("the failed copy's snapshot directory is left")
	}
	if snaps := h.snapshots("c1"); len(snaps) != 1 {
		t.Fatalf("the source's snapshots: %+v", snaps)
	}
	// Without snapshots nothing hits the fault.
	h.OK("copy", "c1", "c3", "--instance-only")
}

// TestCopyWithSnapshotsDir: on the dir driver a copy's snapshots are
// copies that keep sparse files sparse, and independent of the source's.
func TestCopyWithSnapshotsDir(t *testing.T) {
	h := &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: []string{"--storage-driver", "dir"}}), t: t}
	h.OK("launch", "busybox", "d1")
	h.OK("exec", "d1", "--", "sh", "-c", "echo one > /root/v; dd if=/dev/zero of=/root/sparse bs=1 count=1 seek=256M 2>/dev/null")
	h.OK("snapshot", "create", "d1", "s1")
	h.OK("stop", "--force", "d1")
	h.OK("copy", "d1", "d2")
	if snaps := h.snapshots("d2"); len(snaps) != 1 {
		t.Fatalf("the copy's snapshots: %+v", snaps)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(h.PoolPath(), "snapshots", "d2", "s1", "root", "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size <= 256<<20 || st.Blocks*512 > 1<<20 {
		t.Errorf("the copy's sparse file: %d bytes, %d allocated", st.Size, st.Blocks*512)
	}
	h.OK("snapshot", "delete", "d1", "s1")
	h.OK("delete", "d1")
	h.OK("snapshot", "restore", "d2", "s1")
	h.OK("start", "d2")
	if got := h.read("d2", "/root/v"); got != "one\n" {
		t.Errorf("the copy after restoring s1: %q", got)
	}
}

// TestCopyWithSnapshotsToPeer: a copy to another host (of a running
// container, frozen while read) gets its snapshots there, a stateful one
// with its memory, restored in the copy's own id block and address; the
// source keeps its own. --instance-only leaves them. A copy the target
// fails leaves nothing there. Restored in the copy, there or after it
// moved on, the snapshots give it its own identity; in the source, the
// source's.
func TestCopyWithSnapshotsToPeer(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:c1")
	// The guest wrote itself a machine ID before its snapshots.
	const machineID = sourceMachineID
	c.OK("exec", "alpha:c1", "--", "sh", "-c", "echo one > /root/v; printf '"+machineID+"' > /etc/machine-id")
	c.OK("snapshot", "create", "alpha:c1", "first")
	c.OK("exec", "alpha:c1", "--", "sh", "-c", "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /root/count.new; mv /root/count.new /root/count; sleep 0.05; done' </dev/null >/dev/null 2>&1 &")
	eventually(t, "the counter to start", func() bool {
		return c.Vessel("exec", "alpha:c1", "--", "test", "-s", "/root/count").Code == 0
	})
	c.OK("snapshot", "create", "alpha:c1", "second", "--stateful")
	atSnap := snapshotCount(t, c.Host("alpha").PoolPath(), "c1", "second")
	c.OK("exec", "alpha:c1", "--", "sh", "-c", "echo three > /root/v")
	count := func(ref string) int {
		r := c.Vessel("exec", ref, "--", "cat", "/root/count")
		n, _ := strconv.Atoi(strings.TrimSpace(r.Stdout))
		return n
	}
	eventually(t, "the counter to move well past the snapshot", func() bool { return count("alpha:c1") > atSnap+100 })
	beforeCopy := count("alpha:c1")

	// The target fails after the snapshots arrived, as the disk comes:
	// nothing of the copy stays there, and the source runs on.
	beta := c.Host("beta")
	beta.RestartWith("--fault", "migrate.target.recv-disk=fail")
	r := c.Vessel("copy", "alpha:c1", "beta:c2")
	beta.RestartWith()
	if r.Code == 0 || !strings.Contains(r.Stderr, "migrate.target.recv-disk") {
		t.Fatalf("copy despite the target's fault: %s", r)
	}
	if _, ok := listOn(t, c, "beta")["c2"]; ok {
		t.Fatal("beta lists the failed copy")
	}
	for _, p := range []string{"containers/c2", "snapshots/c2", "checkpoints/c2"} {
		if _, err := os.Lstat(filepath.Join(beta.PoolPath(), p)); err == nil {
			t.Errorf("beta keeps %s of the failed copy", p)
		}
	}
	noLeftovers(t, c, "c2")
	if got := c.OK("exec", "alpha:c1", "--", "cat", "/root/v"); got != "three\n" {
		t.Fatalf("the source after the failed copy: %q", got)
	}

	// A copy is a machine of its own: its name in /etc/hostname and
	// /etc/hosts, the source's machine ID emptied (systemd makes one at
	// its first boot).
	c.OK("copy", "alpha:c1", "beta:c2")
	c.OK("copy", "alpha:c1", "beta:c3", "--instance-only")
	if got := c.OK("exec", "alpha:c1", "--", "cat", "/root/v"); got != "three\n" {
		t.Fatalf("the source after the copies: %q", got)
	}
	if got := c.OK("exec", "alpha:c1", "--", "cat", "/etc/machine-id"); got != machineID {
		t.Fatalf("the source's machine ID after the copies: %q", got)
	}
	for _, name := range []string{"c2", "c3"} {
		rootfs := beta.ContainerPath(name)
		if b, err := os.ReadFile(filepath.Join(rootfs, "etc/hostname")); err != nil || string(b) != name+"\n" {
			t.Errorf("%s's /etc/hostname: %q, %v", name, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(rootfs, "etc/hosts")); err != nil || !strings.Contains(string(b), "\t"+name+"\n") {
			t.Errorf("%s's /etc/hosts: %q, %v", name, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(rootfs, "etc/machine-id")); err != nil || len(b) != 0 {
			t.Errorf("%s's /etc/machine-id: %q, %v (want it empty)", name, b, err)
		}
	}
	for ref, want := range map[string][]string{"alpha:c1": {"first", "second"}, "beta:c2": {"first", "second"}, "beta:c3": nil} {
		list := c.OK("snapshot", "list", ref, "--format", "csv")
		if n := strings.Count(strings.TrimSpace(list), "\n"); n != len(want) {
			t.Errorf("%s has %d snapshots, want %v:\n%s", ref, n, want, list)
		}
		for _, s := range want {
			if !strings.Contains(list, s) {
				t.Errorf("%s lacks snapshot %s:\n%s", ref, s, list)
			}
		}
	}
	// The source restoring its own snapshot keeps its own identity.
	c.OK("snapshot", "restore", "alpha:c1", "second", "--stateful", "--force")
	if got := identity(t, c.OK, "alpha:c1"); got != identityOf("c1", machineID) {
		t.Errorf("the source after restoring second (stateful):\n%s", got)
	}
	c.OK("delete", "--force", "alpha:c1")
	// The copy's id block is its own (chosen at its first start).
	c.OK("start", "beta:c2")
	copyMap := c.OK("exec", "beta:c2", "--", "cat", "/proc/1/uid_map")
	c.OK("snapshot", "restore", "beta:c2", "second", "--stateful", "--force")
	if n := count("beta:c2"); n < atSnap || n >= beforeCopy {
		t.Errorf("counter after the copy's stateful restore = %d, want it to go on from %d (below %d)", n, atSnap, beforeCopy)
	}
	if got := c.OK("exec", "beta:c2", "--", "cat", "/proc/1/uid_map"); got != copyMap {
		t.Errorf("restored into id map %q, the copy's is %q", got, copyMap)
	}
	if got := identity(t, c.OK, "beta:c2"); got != identityOf("c2", "") {
		t.Errorf("the copy after restoring second (stateful):\n%s", got)
	}
	cp := instanceOn(t, c, "beta:c2")
	if got := c.OK("exec", "beta:c2", "--", "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, cp.IPv4+"/") {
		t.Errorf("eth0 of the restored copy (its address is %s):\n%s", cp.IPv4, got)
	}
	c.OK("exec", "beta:c2", "--", "sh", "-c", "echo written > /root/w")
	c.OK("snapshot", "restore", "beta:c2", "first", "--force")
	if got := c.OK("exec", "beta:c2", "--", "cat", "/root/v"); got != "one\n" {
		t.Errorf("the copy after restoring first: %q", got)
	}
	if got := identity(t, c.OK, "beta:c2"); got != identityOf("c2", "") {
		t.Errorf("the copy after restoring first:\n%s", got)
	}
	// Its snapshots keep their mark when it moves: restored on alpha,
	// the stateful one still comes back as the copy, not as c1.
	c.OK("move", "beta:c2", "alpha:", "--live")
	c.OK("snapshot", "restore", "alpha:c2", "second", "--stateful", "--force")
	if got := identity(t, c.OK, "alpha:c2"); got != identityOf("c2", "") {
		t.Errorf("the copy moved to alpha after restoring second (stateful):\n%s", got)
	}
	noLeftovers(t, c, "c1")
	noLeftovers(t, c, "c2")
}

// TestCopyToPeerDaemonCrash: a copy to another host whose daemons are
// killed between its steps settles when they come back with the source
// untouched (running on, its snapshots kept: a copy, unlike a move, never
// gives the source up) and the copy either whole on the target or gone
// from it.
func TestCopyToPeerDaemonCrash(t *testing.T) {
	c := newCluster(t)
	alpha, beta := c.Host("alpha"), c.Host("beta")
	c.OK("launch", "busybox", "alpha:k1")
	c.OK("exec", "alpha:k1", "--", "sh", "-c", "echo one > /root/v")
	c.OK("snapshot", "create", "alpha:k1", "s1")
	w := startWorkload(t, c, "alpha:k1")
	pid := instanceOn(t, c, "alpha:k1").PID
	sourceIntact := func(when string) {
		t.Helper()
		settled(t, c, "alpha:k1", api.StatusRunning)
		if p := instanceOn(t, c, "alpha:k1").PID; p != pid {
			t.Fatalf("%s: k1's init pid %d, was %d", when, p, pid)
		}
		w.check("alpha:k1")
		if list := c.OK("snapshot", "list", "alpha:k1", "--format", "csv"); !strings.Contains(list, "s1") {
			t.Fatalf("%s: k1 lost its snapshot:\n%s", when, list)
		}
	}

	// The target dies as the disk arrives (the snapshot is in), then
	// with everything in, before it makes the copy: back up, it drops
	// what it received.
	for _, point := range []string{"migrate.target.recv-disk", "migrate.target.before-restore"} {
		beta.RestartWith("--fault", point+"=crash")
		if r := c.Vessel("copy", "alpha:k1", "beta:k2"); r.Code == 0 {
			t.Fatalf("copy succeeded although the target crashed at %s", point)
		}
		beta.RestartWith()
		sourceIntact("target crash at " + point)
		eventuallyWithin(t, time.Minute, "beta to drop the half-received copy", func() bool {
			_, ok := listOn(t, c, "beta")["k2"]
			return !ok
		})
		for _, p := range []string{"containers/k2", "snapshots/k2", "checkpoints/k2"} {
			if _, err := os.Lstat(filepath.Join(beta.PoolPath(), p)); err == nil {
				t.Errorf("target crash at %s: beta keeps %s", point, p)
			}
		}
		noLeftovers(t, c, "k1")
		noLeftovers(t, c, "k2")
	}

	// The source dies right after telling the target to make the copy:
	// the target needs nothing more from it and the copy is whole there;
	// the source, back up, keeps its container.
	alpha.RestartWith("--fault", "migrate.source.started=crash")
	if r := c.Vessel("copy", "alpha:k1", "beta:k2"); r.Code == 0 {
		t.Fatal("copy succeeded although the source crashed")
	}
	alpha.RestartWith()
	sourceIntact("source crash after start")
	settled(t, c, "beta:k2", api.StatusStopped)
	if list := c.OK("snapshot", "list", "beta:k2", "--format", "csv"); !strings.Contains(list, "s1") {
		t.Fatalf("the copy lacks the snapshot:\n%s", list)
	}
	c.OK("start", "beta:k2")
	if got := c.OK("exec", "beta:k2", "--", "cat", "/root/v"); got != "one\n" {
		t.Fatalf("the copy's file: %q", got)
	}
	noLeftovers(t, c, "k1")
	noLeftovers(t, c, "k2")
}
