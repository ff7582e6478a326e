package guests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/testhost"
)

// instancesCgroup is where systemd's vessel-instances.service puts the
// containers, below the cgroup v2 root.
const instancesCgroup = "/sys/fs/cgroup/vessel.slice/vessel-instances.service"

// guest is one lab guest with the helpers the smoke set needs.
type guest struct {
	lab  *testhost.Lab
	name string
	t    *testing.T
}

func (g guest) ok(cmdline string) string {
	g.t.Helper()
	out, err := g.lab.Exec(g.name, cmdline)
	if err != nil {
		g.t.Fatalf("%s: %s: %v\n%s", g.name, cmdline, err, out)
	}
	return strings.TrimSpace(out)
}

func (g guest) run(cmdline string) (string, error) {
	out, err := g.lab.Exec(g.name, cmdline)
	return strings.TrimSpace(out), err
}

// waitIn runs a shell test in a container until it succeeds, for up to a
// minute (guests under TCG are slow), and fails the test after that.
func (g guest) waitIn(name, test string) {
	g.t.Helper()
	g.ok(fmt.Sprintf(`for i in $(seq 1 300); do vessel exec %s -- sh -c '%s' && exit 0; sleep 0.2; done; `+
		`echo "%s: still not true in %s after a minute" >&2; exit 1`, name, test, test, name))
}

// file reads a cgroup file of container name.
func (g guest) cgroupFile(name, file string) string {
	g.t.Helper()
	return g.ok(fmt.Sprintf("cat %s/%s/%s", instancesCgroup, name, file))
}

// TestSmoke is the lane's smoke set on two guests: the installed package
// under systemd, every limit in the guest's cgroupfs and under a
// workload, a stateful snapshot round trip, a restart of vesseld by
// systemd, and a live move from one guest to the other and back.
func TestSmoke(t *testing.T) {
	lab := testhost.StartLab(t, 2)
	vm1 := guest{lab, "vm1", t}
	vm2 := guest{lab, "vm2", t}
	steps := []struct {
		name string
		fn   func(*testing.T, guest, guest)
	}{
		{"install", testInstall},
		{"limits", testLimits},
		{"workloads", testWorkloads},
		{"snapshot", testStatefulSnapshot},
		{"restart", testRestart},
		{"move", testMove},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) {
			s.fn(t, guest{lab, vm1.name, t}, guest{lab, vm2.name, t})
		}) {
			return
		}
	}
}

// testInstall: the .deb's units run vesseld in vessel-control.slice and
// hold the containers' delegated cgroup; admin init makes the pool on the
// guest's second disk and listens for peers.
func testInstall(t *testing.T, vm1, vm2 guest) {
	for _, g := range []guest{vm1, vm2} {
		g.ok("test \"$(stat -fc %T /sys/fs/cgroup)\" = cgroup2fs")
		ip := g.ok("ip -4 -o addr show | awk '$2 != \"lo\" && $4 ~ /^10\\.89\\./ {sub(\"/.*\", \"\", $4); print $4; exit}'")
		if ip == "" {
			t.Fatalf("%s: no lab address", g.name)
		}
		g.ok("vessel admin init --auto --force --storage-device /dev/vdb --listen " + ip + ":8443")
		g.ok("systemctl is-active vesseld.service vessel-instances.service")
		pid := g.ok("systemctl show -P MainPID vesseld.service")
		if cg := g.ok("cat /proc/" + pid + "/cgroup"); cg != "0::/vessel.slice/vessel-control.slice/vesseld.service" {
			t.Errorf("%s: vesseld's cgroup %q", g.name, cg)
		}
		if w := g.ok("cat /sys/fs/cgroup/vessel.slice/vessel-control.slice/cpu.weight"); w != "1000" {
			t.Errorf("%s: vessel-control.slice cpu.weight %s, want 1000", g.name, w)
		}
		if procs := g.ok("cat " + instancesCgroup + "/cgroup.procs"); procs != "" {
			t.Errorf("%s: the delegated cgroup holds processes itself: %q", g.name, procs)
		}
		info := g.ok("vessel info")
		for _, want := range []string{"v2", "/vessel.slice/vessel-control.slice/vesseld.service, CPU weight 1000 (containers: /vessel.slice/vessel-instances.service, 100)"} {
			if !strings.Contains(info, want) {
				t.Errorf("%s: vessel info lacks %q:\n%s", g.name, want, info)
			}
		}
	}
}

// poolDevice returns the pool disk's MAJ:MIN in a guest.
func poolDevice(g guest) string { return g.ok("cat /sys/class/block/vdb/dev") }

// testLimits: every limit key lands in the cgroup v2 file that enforces
// it, for the pool's disk.
func testLimits(t *testing.T, vm1, _ guest) {
	dev := poolDevice(vm1)
	vm1.ok("vessel launch busybox lim -c limits.cpu=0.5 -c limits.cpu.weight=300 -c limits.memory=64MiB " +
		"-c limits.processes=64 -c limits.disk.read=20MB -c limits.disk.write=10MiB/s " +
		"-c limits.disk.read_iops=500 -c limits.disk.write_iops=400 -c limits.disk.weight=500")
	defer vm1.ok("vessel delete --force lim")
	for file, want := range map[string]string{
		"cpu.max":    "50000 100000",
		"cpu.weight": "300",
		"memory.max": strconv.Itoa(64 << 20),
		"pids.max":   "64",
		"io.max":     dev + " rbps=20000000 wbps=10485760 riops=500 wiops=400",
	} {
		if got := vm1.cgroupFile("lim", file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// The disk weight goes to BFQ's file where the disk runs BFQ, to
	// iocost's io.weight otherwise.
	sched := vm1.ok("cat /sys/class/block/vdb/queue/scheduler")
	if strings.Contains(sched, "[bfq]") {
		if got := vm1.cgroupFile("lim", "io.bfq.weight"); !strings.Contains(got, "default 500") {
			t.Errorf("io.bfq.weight = %q, want default 500 (scheduler %s)", got, sched)
		}
	} else {
		t.Logf("pool disk scheduler %s: no BFQ", sched)
	}
	vm1.ok("vessel config set lim limits.memory=128MiB limits.processes=100 limits.cpu=1")
	for file, want := range map[string]string{
		"memory.max": strconv.Itoa(128 << 20), "pids.max": "100", "cpu.max": "100000 100000",
	} {
		if got := vm1.cgroupFile("lim", file); got != want {
			t.Errorf("after config set: %s = %q, want %q", file, got, want)
		}
	}
}

var eventRe = regexp.MustCompile(`(?m)^(\S+) (\d+)$`)

// events parses a flat-keyed cgroup file (memory.events, pids.events,
// cpu.stat).
func events(s string) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range eventRe.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.ParseUint(m[2], 10, 64)
		out[m[1]] = n
	}
	return out
}

// testWorkloads: each limit holds under a workload that goes past it,
// as the kernel's own counters show.
func testWorkloads(t *testing.T, vm1, _ guest) {
	vm1.ok("vessel launch busybox wl -c limits.memory=32MiB -c limits.cpu=0.2 -c limits.disk.write=5MB")
	defer vm1.ok("vessel delete --force wl")
	vm1.ok("vessel launch busybox forks -c limits.processes=20")
	defer vm1.ok("vessel delete --force forks")

	// Memory: an allocation past the limit is killed, and counted.
	if out, err := vm1.run(`vessel exec wl -- awk 'BEGIN { s = "x"; for (;;) s = s s }'; echo "exit=$?"`); !strings.Contains(out, "exit=137") {
		t.Errorf("allocation past limits.memory: %q %v (want exit 137)", out, err)
	}
	if ev := events(vm1.cgroupFile("wl", "memory.events")); ev["oom_kill"] < 1 {
		t.Errorf("memory.events shows no OOM kill: %v", ev)
	}
	// Processes: forks past the limit fail (in a container of its own:
	// the sleeps hold its pids until it is deleted).
	vm1.run(`vessel exec forks -- sh -c 'for i in $(seq 1 40); do sleep 300 </dev/null >/dev/null 2>&1 & done'`) //nolint:errcheck // the shell dies at the limit
	if ev := events(vm1.cgroupFile("forks", "pids.events")); ev["max"] < 1 {
		t.Errorf("pids.events shows no refused fork: %v", ev)
	}
	if n, _ := strconv.Atoi(vm1.cgroupFile("forks", "pids.current")); n > 20 {
		t.Errorf("pids.current %d > 20", n)
	}
	// CPU: a busy loop under limits.cpu=0.2 is throttled.
	vm1.ok(`vessel exec wl -- timeout 2 sh -c 'while :; do :; done' || true`)
	if st := events(vm1.cgroupFile("wl", "cpu.stat")); st["nr_throttled"] < 1 {
		t.Errorf("cpu.stat shows no throttling under limits.cpu=0.2: %v", st)
	}
	// Buffered writes: on v2 their writeback is charged to the writer's
	// cgroup (v1 charges the flusher), so io.max applies to them. 8 MB
	// written without O_DIRECT, then synced from outside the container.
	dev := poolDevice(vm1)
	before := ioWritten(vm1.cgroupFile("wl", "io.stat"), dev)
	vm1.ok("vessel exec wl -- dd if=/dev/zero of=/buffered bs=1M count=8")
	vm1.ok("sync")
	after := ioWritten(vm1.cgroupFile("wl", "io.stat"), dev)
	if after-before < 8<<20 {
		t.Errorf("io.stat of the writer's cgroup grew by %d bytes for 8 MiB of buffered writes: writeback not charged to it", after-before)
	}
}

// ioWritten returns wbytes for a device from io.stat.
func ioWritten(stat, dev string) uint64 {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != dev {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "wbytes="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// testStatefulSnapshot: a stateful snapshot and its restore bring back
// the processes' memory, not only the disk.
func testStatefulSnapshot(t *testing.T, vm1, _ guest) {
	vm1.ok("vessel launch busybox snap")
	defer vm1.ok("vessel delete --force snap")
	// A shell variable lives only in memory: it comes back only through
	// the memory image.
	vm1.ok(`vessel exec snap -- sh -c 'setsid sh -c "x=before; while :; do echo \$x > /tmp/x; sleep 0.2; done" </dev/null >/dev/null 2>&1 &'`)
	vm1.waitIn("snap", "test -s /tmp/x")
	vm1.ok("vessel snapshot create snap s1 --stateful")
	vm1.ok(`vessel exec snap -- sh -c 'pkill -f "x=before"; echo after > /tmp/x'`)
	vm1.ok("vessel snapshot restore snap s1 --stateful --force")
	vm1.waitIn("snap", "grep -q before /tmp/x")
	if got := vm1.ok("vessel exec snap -- cat /tmp/x"); got != "before" {
		t.Errorf("after a stateful restore /tmp/x = %q, want the loop's %q", got, "before")
	}
}

// testRestart: systemd restarts vesseld; the container keeps running
// (same init pid) and vesseld reattaches to it.
func testRestart(t *testing.T, vm1, _ guest) {
	vm1.ok("vessel launch busybox keep")
	defer vm1.ok("vessel delete --force keep")
	const initPid = `vessel info keep -f csv | awk -F, '$1 == "PID" {print $2}'`
	pid := vm1.ok(initPid)
	vm1.ok("systemctl restart vesseld.service")
	if got := vm1.ok(initPid); got != pid || pid == "" {
		t.Errorf("init pid %q after systemctl restart, was %q", got, pid)
	}
	if st := vm1.ok("vessel list -f csv | grep ^keep,"); !strings.Contains(st, ",Running,") {
		t.Errorf("after restart: %s", st)
	}
	vm1.ok("vessel exec keep -- true")
}

// testMove: the guests trust each other as peers; a container moves live
// from vm1 to vm2 (memory copied before the switch) and back (post-copy).
func testMove(t *testing.T, vm1, vm2 guest) {
	for _, pair := range [][2]guest{{vm1, vm2}, {vm2, vm1}} {
		a, b := pair[0], pair[1]
		addr := b.ok("ip -4 -o addr show | awk '$2 != \"lo\" && $4 ~ /^10\\.89\\./ {sub(\"/.*\", \"\", $4); print $4; exit}'")
		tok := b.ok("vessel trust add " + a.name + "-cli")
		a.ok(fmt.Sprintf("vessel remote add %s %s:8443 --token %s", b.name, addr, tok))
		ptok := b.ok("vessel trust add " + a.name + " --peer")
		a.ok(fmt.Sprintf("vessel peer add %s %s", b.name, ptok))
	}
	vm1.ok("vessel launch busybox mover")
	vm1.ok(`vessel exec mover -- sh -c 'setsid sh -c "n=0; while :; do n=\$((n+1)); echo \$n > /tmp/n; sleep 0.1; done" </dev/null >/dev/null 2>&1 &'`)
	vm1.waitIn("mover", "test -s /tmp/n")
	t.Log(vm1.ok("vessel move mover vm2: --live --memory=copy --timing"))
	if out := vm1.ok("vessel list -f csv"); strings.Contains(out, "mover") {
		t.Errorf("mover still listed on vm1 after the move: %s", out)
	}
	n1 := vm2.ok("vessel exec mover -- cat /tmp/n")
	t.Log(vm2.ok("vessel move mover vm1: --live --memory=lazy --timing"))
	vm1.waitIn("mover", "test $(cat /tmp/n) -gt "+n1)
	n2 := vm1.ok("vessel exec mover -- cat /tmp/n")
	a, _ := strconv.Atoi(n1)
	b, _ := strconv.Atoi(n2)
	if a == 0 || b <= a {
		t.Errorf("the counter did not go on across both moves: %q then %q", n1, n2)
	}
	vm1.ok("vessel delete --force mover")
}
