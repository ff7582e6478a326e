package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// TestVMColdMoveAndCopy moves a small VM (busybox, 256 MiB, TCG here)
// alpha -> beta cold: it is shut down, its disk and snapshots (a stateful
// one with its memory file) go, and it boots on beta with its address
// and MAC. The stateful snapshot restores there: the guest's tmpfs file
// and a process come back. The target failing to start it leaves it
// running on beta with its snapshots, alpha without a trace. A live move
// back takes the snapshots along. A copy of the running VM to beta gets
// its own name, address, MAC and hostname, the source's disk (the source
// runs on) and its snapshots as disk snapshots (the stateful one's memory
// is the source's MAC and address: it stays behind); the copy's snapshot
// restores, with the copy's name and not the source's machine ID (a
// snapshot the source restores keeps its own), and a local copy of the
// stopped copy gets the snapshots too.
// One guest runs at a time.
func TestVMColdMoveAndCopy(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:vm1", "--vm", "-c", "limits.memory=256MiB")
	addr := instanceOn(t, c, "alpha:vm1").IPv4
	// The first exec waits for the agent (the guest boots under TCG).
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo one > /root/v; mkdir -p /mnt/ram; mount -t tmpfs ram /mnt/ram; echo ram1 > /mnt/ram/x; sync")
	pid := strings.TrimSpace(c.OK("exec", "alpha:vm1", "--", "sh", "-c", "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $!"))
	mac := strings.TrimSpace(c.OK("exec", "alpha:vm1", "--", "cat", "/sys/class/net/eth0/address"))
	c.OK("snapshot", "create", "alpha:vm1", "s1", "--stateful")
	// d1 holds a machine ID the guest wrote itself (busybox has no
	// systemd to make one).
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo two > /root/v; echo vm1id > /etc/machine-id; sync")
	c.OK("snapshot", "create", "alpha:vm1", "d1")
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo three > /root/v; sync")

	guest := func(ref, script, want string) {
		t.Helper()
		if got := c.OK("exec", ref, "--", "sh", "-c", script); got != want {
			t.Fatalf("%s: %q gave %q, want %q", ref, script, got, want)
		}
	}
	snapshotsOn := func(ref string) string {
		t.Helper()
		return c.OK("snapshot", "list", ref, "--format", "csv")
	}
	hasSnapshots := func(ref string) {
		t.Helper()
		list := snapshotsOn(ref)
		for _, s := range []string{"s1", "d1"} {
			if !strings.Contains(list, s) {
				t.Fatalf("snapshot %s missing on %s:\n%s", s, ref, list)
			}
		}
	}

	// Cold: shut down, sent, booted on beta with its address and MAC.
	out := c.OK("move", "alpha:vm1", "beta:", "--format", "json", "--timing")
	var tm api.MigrationTiming
	if err := json.Unmarshal([]byte(out), &tm); err != nil {
		t.Fatalf("timing JSON: %v\n%s", err, out)
	}
	// Down from the ACPI power button until it runs on beta; the disk's
	// bytes are the target's count of the stream.
	if tm.Mode != "cold" || tm.AfterSuspendBytes <= 0 || tm.FrozenTotal < tm.SuspendDump || tm.Total < tm.FrozenTotal {
		t.Fatalf("implausible timing %+v", tm)
	}
	t.Logf("cold move: shut down %.2fs, disk %.2fs (%d KiB), started on beta %.2fs, down %.2fs, total %.2fs",
		tm.SuspendDump, tm.CopyAfterSuspend, tm.AfterSuspendBytes>>10, tm.UndumpResume, tm.FrozenTotal, tm.Total)
	if _, still := listOn(t, c, "alpha")["vm1"]; still {
		t.Fatal("vm1 still on alpha")
	}
	inst := instanceOn(t, c, "beta:vm1")
	if inst.Status != api.StatusRunning || inst.IPv4 != addr || inst.Type != "virtual-machine" {
		t.Fatalf("vm1 on beta: %+v (address was %s)", inst, addr)
	}
	guest("beta:vm1", "cat /root/v /sys/class/net/eth0/address; test -e /mnt/ram/x || echo rebooted", "three\n"+mac+"\nrebooted\n")
	hasSnapshots("beta:vm1")
	noLeftovers(t, c, "vm1")

	// The stateful snapshot's memory came along: the tmpfs file and the
	// sleep are back, with the disk of that instant.
	c.OK("snapshot", "restore", "beta:vm1", "s1", "--stateful", "--force")
	guest("beta:vm1", "cat /root/v /mnt/ram/x; kill -0 "+pid+" && echo alive", "one\nram1\nalive\n")
	c.OK("snapshot", "restore", "beta:vm1", "d1", "--force")
	// Its own snapshot: its own machine ID stays.
	guest("beta:vm1", "cat /root/v /etc/machine-id; hostname", "two\nvm1id\nvm1\n")

	// beta fails to start it on alpha: it boots again on beta, snapshots
	// and all; alpha keeps nothing.
	alpha := c.Host("alpha")
	alpha.RestartWith("--fault", "migrate.vm.target.start=fail")
	r := c.Vessel("move", "beta:vm1", "alpha:")
	alpha.RestartWith()
	if r.Code == 0 {
		t.Fatal("move succeeded although the target failed to start the VM")
	}
	t.Logf("move error:\n%s", strings.TrimSpace(r.Stderr))
	if !strings.Contains(r.Stderr, "migrate.vm.target.start") {
		t.Errorf("error does not name the fault: %s", r.Stderr)
	}
	if _, ok := listOn(t, c, "alpha")["vm1"]; ok {
		t.Fatal("alpha lists vm1 after the failed move")
	}
	if inst := instanceOn(t, c, "beta:vm1"); inst.Status != api.StatusRunning {
		t.Fatalf("vm1 on beta after the failed move: %+v", inst)
	}
	guest("beta:vm1", "cat /root/v", "two\n")
	hasSnapshots("beta:vm1")
	noLeftovers(t, c, "vm1")

	// Live, the snapshots go too.
	c.OK("move", "beta:vm1", "alpha:", "--live")
	hasSnapshots("alpha:vm1")
	guest("alpha:vm1", "cat /root/v", "two\n")
	noLeftovers(t, c, "vm1")

	// A copy of the running VM to beta: a new VM there, stopped, with
	// the disk; the source runs on.
	// The guest wrote itself a machine ID: its copies' first boots
	// empty theirs (systemd would make each its own), the source keeps it.
	const machineID = "0123456789abcdef0123456789abcdef"
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo four > /root/v; echo "+machineID+" > /etc/machine-id; sync")
	c.OK("copy", "alpha:vm1", "beta:vm2")
	if inst := instanceOn(t, c, "alpha:vm1"); inst.Status != api.StatusRunning {
		t.Fatalf("vm1 after the copy: %+v", inst)
	}
	guest("alpha:vm1", "cat /root/v /etc/machine-id", "four\n"+machineID+"\n")
	c.OK("stop", "alpha:vm1", "--force")
	cp := instanceOn(t, c, "beta:vm2")
	if cp.Status != api.StatusStopped || cp.Type != "virtual-machine" || cp.IPv4 == addr {
		t.Fatalf("the copy: %+v", cp)
	}
	hasSnapshots("beta:vm2")
	if r := c.Vessel("snapshot", "restore", "beta:vm2", "s1", "--stateful"); r.Code == 0 || !strings.Contains(r.Stderr, "no memory state") {
		t.Errorf("the copy's s1 restored with memory: %s", r)
	}
	c.OK("start", "beta:vm2")
	vm2mac := strings.TrimSpace(c.OK("exec", "beta:vm2", "--", "cat", "/sys/class/net/eth0/address"))
	if vm2mac == mac {
		t.Errorf("the copy has the source's MAC %s", mac)
	}
	guest("beta:vm2", "cat /root/v; hostname; test -s /etc/machine-id && echo kept || echo emptied", "four\nvm2\nemptied\n")
	c.OK("stop", "beta:vm2", "--force")
	// The copy's snapshot is its own: it restores after the source's goes.
	// It is the source's disk: the boot after its restore (not the
	// copy's first) empties the source's machine ID again, and the guest
	// is named the copy's.
	c.OK("snapshot", "delete", "alpha:vm1", "d1")
	c.OK("snapshot", "restore", "beta:vm2", "d1")
	c.OK("start", "beta:vm2")
	guest("beta:vm2", "cat /root/v /etc/hostname; hostname; test -s /etc/machine-id && echo kept || echo emptied", "two\nvm2\nvm2\nemptied\n")
	c.OK("stop", "beta:vm2", "--force")

	// Here: a stopped VM's copy, with the snapshots.
	c.OK("copy", "beta:vm2", "vm3") // on beta
	hasSnapshots("beta:vm3")
	c.OK("start", "beta:vm3")
	guest("beta:vm3", "cat /root/v; hostname", "two\nvm3\n")
	// Only the first boot: an ID the copy's guest makes then is its own.
	c.OK("exec", "beta:vm3", "--", "sh", "-c", "echo vm3id > /etc/machine-id; sync")
	c.OK("stop", "beta:vm3", "--force")
	c.OK("start", "beta:vm3")
	guest("beta:vm3", "cat /etc/machine-id", "vm3id\n")
	if got := strings.TrimSpace(c.OK("exec", "beta:vm3", "--", "cat", "/sys/class/net/eth0/address")); got == vm2mac || got == mac {
		t.Errorf("the local copy's MAC %s is its source's", got)
	}
	for _, ref := range []string{"beta:vm3", "beta:vm2", "alpha:vm1"} {
		c.OK("delete", ref, "--force")
	}
}

// TestCopyRunningToPeer copies a running container to another host: it
// is frozen while its disk is read and runs on afterwards (not left
// frozen); the copy, stopped, has the disk and an address of its own.
func TestCopyRunningToPeer(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:c1")
	c.OK("exec", "alpha:c1", "--", "sh", "-c", "echo copied > /root/file")
	c.OK("copy", "alpha:c1", "beta:c2")
	src := instanceOn(t, c, "alpha:c1")
	if src.Status != api.StatusRunning {
		t.Fatalf("source after the copy: %+v", src)
	}
	if st := c.OK("exec", "alpha:c1", "--", "echo", "thawed"); st != "thawed\n" {
		t.Fatalf("source after the copy: %q", st)
	}
	cp := instanceOn(t, c, "beta:c2")
	if cp.Status != api.StatusStopped || cp.IPv4 == src.IPv4 {
		t.Fatalf("the copy: %+v (source at %s)", cp, src.IPv4)
	}
	c.OK("start", "beta:c2")
	if got := c.OK("exec", "beta:c2", "--", "cat", "/root/file"); got != "copied\n" {
		t.Fatalf("the copy's file: %q", got)
	}
	noLeftovers(t, c, "c1")
}

// TestVMColdMoveDaemonCrash kills a daemon (SIGKILL) in the middle of a
// VM's cold move, at each end, as TestMigrationDaemonCrash does a
// container's live move. The target dies as it starts the VM: the source
// cannot tell whether it runs there, keeps it stopped and asks until the
// target is back, which deletes its half; the VM boots again on the
// source. The source dies right after telling the target to start it:
// the target runs it, and the source, back up, drops its copy. The VM
// runs in one place each time, with its disk.
func TestVMColdMoveDaemonCrash(t *testing.T) {
	c := newCluster(t)
	alpha, beta := c.Host("alpha"), c.Host("beta")
	c.OK("launch", "busybox", "alpha:vm1", "--vm", "-c", "limits.memory=256MiB")
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo kept > /root/marker; sync")
	marker := func(ref string) {
		t.Helper()
		if got := c.OK("exec", ref, "--", "cat", "/root/marker"); got != "kept\n" {
			t.Fatalf("%s: marker %q", ref, got)
		}
	}

	beta.RestartWith("--fault", "migrate.vm.target.start=crash")
	r := c.Vessel("move", "alpha:vm1", "beta:")
	if r.Code == 0 {
		t.Fatal("move succeeded although the target crashed")
	}
	t.Logf("target crash: %s", strings.TrimSpace(r.Stderr))
	beta.RestartWith()
	settled(t, c, "alpha:vm1", api.StatusRunning)
	marker("alpha:vm1")
	noLeftovers(t, c, "vm1")
	if _, ok := listOn(t, c, "beta")["vm1"]; ok {
		t.Fatal("target crash: the target still lists vm1")
	}

	alpha.RestartWith("--fault", "migrate.source.started=crash")
	if r := c.Vessel("move", "alpha:vm1", "beta:"); r.Code == 0 {
		t.Fatal("move succeeded although the source crashed")
	}
	alpha.RestartWith()
	settled(t, c, "beta:vm1", api.StatusRunning)
	eventuallyWithin(t, 2*time.Minute, "the source to drop its copy", func() bool {
		_, ok := listOn(t, c, "alpha")["vm1"]
		return !ok
	})
	marker("beta:vm1")
	noLeftovers(t, c, "vm1")
	c.OK("delete", "beta:vm1", "--force")
}

// TestVMColdMoveDirDriver moves a VM with a stateful snapshot cold
// between hosts on the dir storage driver (the disk in tar-sync passes,
// holes travelling as zeros): on the target the disk and the state file
// are sparse again, take about what the source's take, and the snapshot
// restores there.
func TestVMColdMoveDirDriver(t *testing.T) {
	c := testhost.NewCluster(t, binDir, testhost.ClusterOptions{HostArgs: []string{"--storage-driver", "dir"}})
	c.OK("launch", "busybox", "alpha:vm1", "--vm", "-c", "limits.memory=256MiB")
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo one > /root/v; mkdir -p /mnt/ram; mount -t tmpfs ram /mnt/ram; echo ram1 > /mnt/ram/x; sync")
	c.OK("snapshot", "create", "alpha:vm1", "s1", "--stateful")
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo two > /root/v; sync")
	files := []string{"containers/vm1/disk.img", "checkpoints/vm1/s1/vm.state"}
	usage := func(host string) []int64 {
		t.Helper()
		var out []int64
		for _, f := range files {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(c.Host(host).Root(), "storage-pools/default", f), &st); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s: %d MiB, %d MiB allocated", host, f, st.Size>>20, st.Blocks*512>>20)
			out = append(out, st.Blocks*512)
		}
		return out
	}
	before := usage("alpha")
	c.OK("move", "alpha:vm1", "beta:")
	after := usage("beta")
	for i, f := range files {
		// The guest's writes since (a console log, /root/v) are small.
		if after[i] > before[i]+16<<20 {
			t.Errorf("%s takes %d MiB on the target, %d MiB on the source: not sparse", f, after[i]>>20, before[i]>>20)
		}
	}
	if got := c.OK("exec", "beta:vm1", "--", "cat", "/root/v"); got != "two\n" {
		t.Fatalf("after the move: %q", got)
	}
	c.OK("snapshot", "restore", "beta:vm1", "s1", "--stateful", "--force")
	if got := c.OK("exec", "beta:vm1", "--", "cat", "/root/v", "/mnt/ram/x"); got != "one\nram1\n" {
		t.Fatalf("after the stateful restore on the target: %q", got)
	}
	c.OK("delete", "beta:vm1", "--force")
}
