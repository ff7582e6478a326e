package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

func newCluster(t *testing.T) *testhost.Cluster {
	return testhost.NewCluster(t, binDir, testhost.ClusterOptions{})
}

// workload runs in a container what a live move must not disturb: a
// counter kept in a shell's memory, a file appended to continuously, and
// a TCP echo server the test stays connected to.
type workload struct {
	t     *testing.T
	c     *testhost.Cluster
	conn  net.Conn
	rd    *bufio.Reader
	count int
	pings int
}

func startWorkload(t *testing.T, c *testhost.Cluster, ref string) *workload {
	t.Helper()
	bg := func(script string) {
		c.OK("exec", ref, "--", "sh", "-c", "setsid sh -c '"+script+"' </dev/null >/dev/null 2>&1 &")
	}
	// The counter lives in the shell's memory; the file shows it, replaced
	// whole by a rename so that a reader never sees it half written.
	bg(`i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; usleep 20000; done`)
	bg(`n=0; while :; do n=$((n+1)); echo "line $n" >> /root/log; usleep 20000; done`)
	bg(`nc -ll -p 7000 -e cat`)
	inst := instanceOn(t, c, ref)
	w := &workload{t: t, c: c}
	eventually(t, "echo server", func() bool {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(inst.IPv4, "7000"), time.Second)
		if err != nil {
			return false
		}
		w.conn, w.rd = conn, bufio.NewReader(conn)
		return true
	})
	t.Cleanup(func() { w.conn.Close() })
	w.check(ref)
	return w
}

// check asserts the workload is intact where ref runs now.
func (w *workload) check(ref string) {
	w.t.Helper()
	// The counter continues from where it was: no reset.
	out := strings.TrimSpace(w.c.OK("exec", ref, "--", "cat", "/tmp/count"))
	n, err := strconv.Atoi(out)
	if err != nil || n < w.count {
		w.t.Fatalf("counter on %s = %q, was %d: reset or lost", ref, out, w.count)
	}
	w.count = n
	// The file holds every line once, in order.
	// (A line being appended as we read may be cut: only whole lines count.)
	log := w.c.OK("exec", ref, "--", "cat", "/root/log")
	lines := strings.Split(strings.TrimSpace(log[:strings.LastIndexByte(log, '\n')+1]), "\n")
	for i, l := range lines {
		if l != fmt.Sprintf("line %d", i+1) {
			w.t.Fatalf("log file on %s broken at line %d: %q", ref, i+1, l)
		}
	}
	// The same TCP connection still answers.
	w.pings++
	msg := fmt.Sprintf("ping %d\n", w.pings)
	_ = w.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := w.conn.Write([]byte(msg)); err != nil {
		w.t.Fatalf("TCP write after move to %s: %v", ref, err)
	}
	got, err := w.rd.ReadString('\n')
	if err != nil || got != msg {
		w.t.Fatalf("TCP echo after move to %s: %q, %v", ref, got, err)
	}
}

func instanceOn(t *testing.T, c *testhost.Cluster, ref string) api.Instance {
	t.Helper()
	var i api.Instance
	if err := json.Unmarshal([]byte(c.OK("info", ref, "--format", "json")), &i); err != nil {
		t.Fatal(err)
	}
	return i
}

func listOn(t *testing.T, c *testhost.Cluster, remote string) map[string]api.Instance {
	t.Helper()
	var list []api.Instance
	if err := json.Unmarshal([]byte(c.OK("list", remote+":", "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Instance{}
	for _, i := range list {
		out[i.Name] = i
	}
	return out
}

// TestLiveMigrationRoundTrips moves a busy container back and forth ten
// times, in both memory modes, checking the workload after every move,
// with memtick rewriting 64 MiB (one mapping resident in full, which the
// dump lists without PAGEMAP_SCAN, CRIU patch 0037): every word checked
// after each move.
func TestLiveMigrationRoundTrips(t *testing.T) {
	c := newCluster(t)
	memtick := buildMemtick(t)
	c.OK("launch", "busybox", "alpha:w1")
	addr := instanceOn(t, c, "alpha:w1").IPv4
	w := startWorkload(t, c, "alpha:w1")
	c.Host("alpha").StartMemtick("w1", memtick, 64, 16)
	// The console log (init's boot output) moves with the container.
	var boot string
	eventually(t, "boot output in the console log", func() bool {
		boot = c.OK("console", "alpha:w1")
		return strings.Contains(boot, "w1")
	})
	// The container's tmpfs trees (CRIU archives them on every move)
	// keep their entries and owners as the container sees them. Not
	// /dev/mqueue's root: the mqueue superblock belongs to the IPC
	// namespace, whose creator owns it, and CRIU's restore creates that
	// namespace outside the user namespace (0:65534 becomes 65534:65534).
	c.OK("exec", "alpha:w1", "--", "sh", "-c", "touch /run/owned && chown 1000:2000 /run/owned && chmod 640 /run/owned")
	trees := func(at string) string {
		return c.OK("exec", at, "--", "sh", "-c", "find /dev /run /sys/fs/cgroup -xdev | grep -v '^/dev/mqueue$' | sort | xargs stat -c '%n %u:%g %a %F'")
	}
	before := trees("alpha:w1")
	if !strings.Contains(before, "/run/owned 1000:2000 640 ") {
		t.Fatalf("tmpfs listing lacks /run/owned:\n%s", before)
	}
	hosts := []string{"alpha", "beta"}
	for i := 0; i < 20; i++ {
		from, to := hosts[i%2], hosts[(i+1)%2]
		mode := api.MemoryLazy
		if i%4 >= 2 {
			mode = api.MemoryCopy
		}
		out := c.OK("move", from+":w1", to+":", "--live", "--memory", mode, "--format", "json")
		var tm api.MigrationTiming
		if err := json.Unmarshal([]byte(out), &tm); err != nil {
			t.Fatalf("move %d: timing JSON: %v\n%s", i, err, out)
		}
		if tm.FrozenTotal <= 0 || tm.PrecopyIterations < 1 || tm.Total < tm.FrozenTotal {
			t.Errorf("move %d: implausible timing %+v", i, tm)
		}
		t.Logf("move %d %s->%s (%s): frozen %.3fs total %.3fs", i, from, to, mode, tm.FrozenTotal, tm.Total)
		if _, still := listOn(t, c, from)["w1"]; still {
			t.Fatalf("move %d: w1 still on %s", i, from)
		}
		inst := listOn(t, c, to)["w1"]
		if inst.Status != api.StatusRunning || inst.IPv4 != addr {
			t.Fatalf("move %d: w1 on %s: %+v (address was %s)", i, to, inst, addr)
		}
		w.check(to + ":w1")
		if got := c.Host(to).VerifyMemtick("w1"); got != "ok" {
			t.Fatalf("move %d (%s): memtick's memory on %s: %s", i, mode, to, got)
		}
		if got := trees(to + ":w1"); got != before {
			t.Fatalf("move %d: the tmpfs trees changed:\nbefore:\n%s\nafter:\n%s", i, before, got)
		}
		if log := c.OK("console", to+":w1"); !strings.HasPrefix(log, boot) {
			t.Fatalf("move %d: console log on %s lost the boot output:\n%s", i, to, log)
		}
		// A process `vessel exec` starts in a restored container joins
		// its time namespace (runc's state after the restore says it
		// has one), so it moves with the container from then on.
		if i == 0 {
			c.OK("exec", to+":w1", "--", "sh", "-c", "setsid sleep 86400 </dev/null >/dev/null 2>&1 &")
		} else if strings.TrimSpace(c.OK("exec", to+":w1", "--", "pidof", "sleep")) == "" {
			t.Fatalf("move %d: the process exec started after the first restore is gone", i)
		}
	}
	for _, h := range c.Hosts {
		left, _ := filepath.Glob(filepath.Join(h.Root(), "storage-pools/default/snapshots/w1/.migrate-*"))
		if len(left) != 0 {
			t.Errorf("%s keeps transfer snapshots %v", h.Name(), left)
		}
	}
}

// TestColdMove stops, moves and starts a container; its files and address
// move with it.
func TestColdMove(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:cold1")
	c.OK("exec", "alpha:cold1", "--", "sh", "-c", "echo kept > /root/file")
	addr := instanceOn(t, c, "alpha:cold1").IPv4
	c.OK("move", "alpha:cold1", "beta:cold2")
	inst := instanceOn(t, c, "beta:cold2")
	if inst.Status != api.StatusRunning || inst.IPv4 != addr {
		t.Fatalf("after cold move: %+v", inst)
	}
	if got := c.OK("exec", "beta:cold2", "--", "cat", "/root/file"); got != "kept\n" {
		t.Fatalf("file after move: %q", got)
	}
	// A stopped container moves and stays stopped.
	c.OK("stop", "--force", "beta:cold2")
	c.OK("move", "beta:cold2", "alpha:")
	if inst := instanceOn(t, c, "alpha:cold2"); inst.Status != api.StatusStopped {
		t.Fatalf("stopped container after move: %+v", inst)
	}
	c.OK("start", "alpha:cold2")
}

// TestMigrationFaults injects a failure at each step of a live move: the
// container must keep running on the source, untouched, and the target
// must be left clean.
func TestMigrationFaults(t *testing.T) {
	c := newCluster(t)
	alpha, beta := c.Host("alpha"), c.Host("beta")
	c.OK("launch", "busybox", "alpha:f1")
	w := startWorkload(t, c, "alpha:f1")
	pid := instanceOn(t, c, "alpha:f1").PID

	survived := func(what string) {
		t.Helper()
		inst := instanceOn(t, c, "alpha:f1")
		if inst.Status != api.StatusRunning || inst.PID != pid {
			t.Fatalf("%s: source container %+v (pid was %d)", what, inst, pid)
		}
		w.check("alpha:f1")
		if _, ok := listOn(t, c, "beta")["f1"]; ok {
			t.Fatalf("%s: target still lists f1", what)
		}
		for _, p := range []string{"containers/f1", "snapshots/f1"} {
			if _, err := os.Stat(filepath.Join(beta.Root(), "storage-pools/default", p)); err == nil {
				t.Fatalf("%s: target keeps %s", what, p)
			}
		}
		left, _ := filepath.Glob(filepath.Join(alpha.Root(), "storage-pools/default/snapshots/f1/.migrate-*"))
		if len(left) != 0 {
			t.Fatalf("%s: source keeps transfer snapshots %v", what, left)
		}
	}

	for _, fault := range []string{
		"migrate.target.recv-disk=cut",
		"migrate.target.before-restore=cut",
		"migrate.target.before-restore=fail",
		"migrate.target.restore=fail",
	} {
		beta.RestartWith("--fault", fault)
		for _, mode := range []string{api.MemoryLazy, api.MemoryCopy} {
			r := c.Vessel("move", "alpha:f1", "beta:", "--live", "--memory", mode)
			if r.Code == 0 {
				t.Fatalf("move succeeded despite %s", fault)
			}
			t.Logf("%s (%s): %s", fault, mode, strings.TrimSpace(r.Stderr))
			survived(fault + " " + mode)
		}
	}
	// A restore that never returns (a stuck CRIU) is stopped at the
	// target's deadline, and the source resumes.
	beta.RestartWith("--fault", "migrate.target.restore=hang", "--restore-timeout", "2s")
	for _, mode := range []string{api.MemoryLazy, api.MemoryCopy} {
		r := c.Vessel("move", "alpha:f1", "beta:", "--live", "--memory", mode)
		if r.Code == 0 || !strings.Contains(r.Stderr, "did not finish within 2s") {
			t.Fatalf("move with a hung restore (%s): exit %d, %s", mode, r.Code, r.Stderr)
		}
		t.Logf("hung restore (%s): %s", mode, strings.TrimSpace(r.Stderr))
		survived("hung restore " + mode)
	}
	beta.RestartWith()

	// The target is down: the source cannot even connect.
	fp := func() string {
		srv, err := beta.Client().Server(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return srv.Fingerprint
	}()
	beta.StopDaemon()
	op, err := alpha.Client().MigrateInstance(context.Background(), "f1", api.InstanceMigratePost{TargetFingerprint: fp, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("move to a stopped host: %v", err)
	}
	beta.Start()
	survived("target down")

	// The target's disk is full.
	pool := filepath.Join(beta.Root(), "storage-pools/default")
	fillDisk(t, pool)
	r := c.Vessel("move", "alpha:f1", "beta:", "--live")
	if r.Code == 0 {
		t.Fatal("move to a full disk succeeded")
	}
	t.Logf("disk full: %s", strings.TrimSpace(r.Stderr))
	if err := os.Remove(filepath.Join(pool, "filler")); err != nil {
		t.Fatal(err)
	}
	survived("disk full")

	// And after all that, the move works, also when the target could not
	// ready the restore's root before "start" (the restore does it).
	beta.RestartWith("--fault", "migrate.target.early-root=fail")
	c.OK("move", "alpha:f1", "beta:", "--live")
	w.check("beta:f1")
}

// fillDisk fills a filesystem with a file named "filler".
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Cleanup(func() { os.Remove(filepath.Join(dir, "filler")) })
	// Allocate all free space, then top up with writes until ENOSPC.
	_ = unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*int64(st.Bsize)) //nolint:unconvert // int32 on 32-bit
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	_ = f.Sync()
}

// TestMoveWithSnapshots moves a container with a disk snapshot and a
// stateful one; both arrive, and the stateful one restores on the target,
// also after a cold move (which gives the container a new id block).
func TestMoveWithSnapshots(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:s1", "-c", "limits.memory=256MiB", "-c", "limits.processes=200")
	c.OK("exec", "alpha:s1", "--", "sh", "-c", "echo one > /root/v")
	c.OK("snapshot", "create", "alpha:s1", "first")
	c.OK("exec", "alpha:s1", "--", "sh", "-c", "echo two > /root/v")
	c.OK("snapshot", "create", "alpha:s1", "second", "--stateful")
	c.OK("exec", "alpha:s1", "--", "sh", "-c", "echo three > /root/v")

	c.OK("move", "alpha:s1", "beta:", "--live")
	// Its limits moved with it and hold on the target's cgroup.
	if st := instanceOn(t, c, "beta:s1").State; st == nil || st.MemoryLimit != 256<<20 {
		t.Fatalf("memory limit on the target: %+v", st)
	}
	if got := c.OK("config", "get", "beta:s1", "limits.processes"); strings.TrimSpace(got) != "200" {
		t.Fatalf("limits.processes on the target: %q", got)
	}
	list := c.OK("snapshot", "list", "beta:s1", "--format", "csv")
	for _, want := range []string{"first", "second"} {
		if !strings.Contains(list, want) {
			t.Fatalf("snapshot %s missing on the target:\n%s", want, list)
		}
	}
	if got := c.OK("exec", "beta:s1", "--", "cat", "/root/v"); got != "three\n" {
		t.Fatalf("container content after move: %q", got)
	}
	c.OK("snapshot", "restore", "beta:s1", "second", "--stateful", "--force")
	if got := c.OK("exec", "beta:s1", "--", "cat", "/root/v"); got != "two\n" {
		t.Fatalf("after stateful restore on the target: %q", got)
	}
	c.OK("snapshot", "restore", "beta:s1", "first", "--force")
	if got := c.OK("exec", "beta:s1", "--", "cat", "/root/v"); got != "one\n" {
		t.Fatalf("after disk restore on the target: %q", got)
	}
	// Back cold: the container gets an id block of its own on alpha, and
	// the stateful snapshot restores into it (runtime.MapUserns).
	c.OK("move", "beta:s1", "alpha:")
	c.OK("snapshot", "restore", "alpha:s1", "second", "--stateful", "--force")
	if got := c.OK("exec", "alpha:s1", "--", "cat", "/root/v"); got != "two\n" {
		t.Fatalf("after stateful restore of a snapshot that moved cold: %q", got)
	}
	c.OK("exec", "alpha:s1", "--", "sh", "-c", "echo four > /root/v")
	// And over again, leaving the snapshots behind on purpose.
	c.OK("move", "alpha:s1", "beta:", "--instance-only")
	if list := c.OK("snapshot", "list", "beta:s1", "--format", "csv"); strings.Contains(list, "first") {
		t.Fatalf("--instance-only moved snapshots:\n%s", list)
	}
}

// TestMigrationCRIURefuses moves a container CRIU cannot checkpoint (a
// process stopped under its parent's ptrace): the move fails with CRIU's
// reason and the container keeps running untouched on the source.
func TestMigrationCRIURefuses(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "undumpable")
	if err := testhost.BuildUndumpable(prog); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:u1")
	c.Host("alpha").Install("u1", prog)
	c.OK("exec", "alpha:u1", "--", "sh", "-c", "setsid undumpable </dev/null >/dev/null 2>&1 &")
	c.OK("exec", "alpha:u1", "--", "sh", "-c", "while [ ! -e /tmp/undumpable.ready ]; do usleep 50000; done")
	pid := instanceOn(t, c, "alpha:u1").PID
	for _, mode := range []string{api.MemoryLazy, api.MemoryCopy} {
		r := c.Vessel("move", "alpha:u1", "beta:", "--live", "--memory", mode)
		if r.Code == 0 {
			t.Fatalf("%s: move of an undumpable container succeeded", mode)
		}
		if !strings.Contains(r.Stderr, "checkpoint") || !strings.Contains(r.Stderr, "criu") {
			t.Errorf("%s: error does not carry CRIU's reason:\n%s", mode, r.Stderr)
		}
		// What happened and where the container is, then CRIU's reason,
		// never the rlimit line every unprivileged CRIU run logs.
		phase := map[string]string{api.MemoryLazy: "checkpoint", api.MemoryCopy: "memory copy"}[mode]
		head := "Error: the move of u1 to beta failed during the " + phase + "; u1 keeps running on alpha\n"
		if !strings.HasPrefix(r.Stderr, head) || !strings.Contains(r.Stderr, "zombie") || strings.Contains(r.Stderr, "RLIMIT_NOFILE") {
			t.Errorf("%s: error does not start with %q, then CRIU's cause:\n%s", mode, head, r.Stderr)
		}
		t.Logf("%s: %s", mode, firstLines(r.Stderr, 6))
		inst := instanceOn(t, c, "alpha:u1")
		if inst.Status != api.StatusRunning || inst.PID != pid {
			t.Fatalf("%s: source container after refused move: %+v (pid was %d)", mode, inst, pid)
		}
		if got := c.OK("exec", "alpha:u1", "--", "echo", "alive"); got != "alive\n" {
			t.Fatalf("%s: exec after refused move: %q", mode, got)
		}
		if _, ok := listOn(t, c, "beta")["u1"]; ok {
			t.Fatalf("%s: target still lists u1", mode)
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestLiveMigrationDirDriver moves a busy container between hosts on the
// dir storage driver: rsync-style passes instead of btrfs streams.
func TestLiveMigrationDirDriver(t *testing.T) {
	c := testhost.NewCluster(t, binDir, testhost.ClusterOptions{HostArgs: []string{"--storage-driver", "dir"}})
	if out := c.OK("storage", "info", "beta:"); !strings.Contains(out, "dir") {
		t.Fatalf("storage info:\n%s", out)
	}
	c.OK("launch", "busybox", "alpha:d1")
	c.OK("snapshot", "create", "alpha:d1", "snap1")
	w := startWorkload(t, c, "alpha:d1")
	for i, hop := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}, {"alpha", "beta"}} {
		out := c.OK("move", hop[0]+":d1", hop[1]+":", "--live", "--format", "json")
		var tm api.MigrationTiming
		if err := json.Unmarshal([]byte(out), &tm); err != nil {
			t.Fatalf("move %d: %v\n%s", i, err, out)
		}
		t.Logf("move %d: frozen %.3fs, %d passes, %d bytes pre-copied", i, tm.FrozenTotal, tm.PrecopyIterations, tm.PrecopyBytes)
		w.check(hop[1] + ":d1")
	}
	if list := c.OK("snapshot", "list", "beta:d1", "--format", "csv"); !strings.Contains(list, "snap1") {
		t.Fatalf("snapshot did not move:\n%s", list)
	}
	// A cold move too.
	c.OK("move", "beta:d1", "alpha:")
	if got := c.OK("exec", "alpha:d1", "--", "sh", "-c", "head -n1 /root/log"); got != "line 1\n" {
		t.Fatalf("file after cold move: %q", got)
	}
}

// TestMoveMemoryAuto: without --memory a live move copies the memory of a
// container with little of it while frozen, and moves a bigger one
// pre-copy or post-copy. And a process exec'd into a restored container (it keeps the
// host's clocks, see checkDumpable) gets a clear refusal, not a failed
// restore after the freeze.
func TestMoveMemoryAuto(t *testing.T) {
	c := newCluster(t)
	memhog := buildMemhog(t)
	c.OK("launch", "busybox", "alpha:small")
	c.OK("launch", "busybox", "alpha:big")
	c.Host("alpha").StartMemhog("big", memhog, 32)
	mode := func(ref, to string) string {
		var tm api.MigrationTiming
		out := c.OK("move", ref, to+":", "--live", "--format", "json")
		if err := json.Unmarshal([]byte(out), &tm); err != nil {
			t.Fatalf("timing: %v\n%s", err, out)
		}
		return tm.Mode
	}
	if got := mode("alpha:small", "beta"); got != "live/"+api.MemoryCopy {
		t.Errorf("idle container moved as %q, want live/copy", got)
	}
	// Pre-copy where the kernel tracks writes and auto's trial keeps it,
	// else post-copy: never the whole memory while frozen.
	if got := mode("alpha:big", "beta"); got != "live/"+api.MemoryLazy && got != "live/"+api.MemoryPrecopy {
		t.Errorf("container with 32 MiB moved as %q, want live/lazy or live/precopy", got)
	}
	// Every byte came through (pre-copy's passes or post-copy's pull).
	if got := c.Host("beta").VerifyMemhog("big"); got != "ok" {
		t.Errorf("memhog's memory after the post-copy move: %s", got)
	}

	// A process started by exec in a restored container joins its time
	// namespace (runc 1.2 and later), so it moves with it.
	c.OK("exec", "beta:small", "--", "sh", "-c", "setsid sleep 600 </dev/null >/dev/null 2>&1 &")
	c.OK("move", "beta:small", "alpha:", "--live")
	if out := c.OK("exec", "alpha:small", "--", "pidof", "sleep"); strings.TrimSpace(out) == "" {
		t.Fatalf("the exec'd sleep did not move")
	}
}
