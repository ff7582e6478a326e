package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
)

// The limits tests read the kernel's cgroup files directly: what vessel
// says it applied is only believed when the kernel shows it.

var v2 = cgroups.HostVersion() == cgroups.V2

// poolDevices returns the pool's devices ("MAJ:MIN"): the loop device, then
// the disk under it.
func (h *host) poolDevices() []string {
	h.t.Helper()
	var out []string
	for _, d := range h.ServerInfo().Host.StorageDevices {
		out = append(out, d.Device)
	}
	if len(out) == 0 {
		h.t.Fatal("host info lists no storage devices")
	}
	return out
}

// defaultLimit returns the host's default for a limits key as the kernel
// shows it: pids.max's number, or the memory limit's bytes.
func (h *host) defaultLimit(key string) string {
	h.t.Helper()
	v := h.ServerInfo().Host.DefaultLimits[key]
	if v == "" {
		h.t.Fatalf("host info shows no default %s", key)
	}
	if key == "limits.memory" {
		mib, ok := strings.CutSuffix(v, "MiB")
		n, err := strconv.ParseInt(mib, 10, 64)
		if !ok || err != nil {
			h.t.Fatalf("default limits.memory %q: want whole MiB", v)
		}
		return strconv.FormatInt(n<<20, 10)
	}
	return v
}

// limitFiles maps each limits key, set to a test value, to the cgroup file
// and content that show it applied, and to the content once unset (the
// host's default limit, for the keys that have one).
type limitFile struct {
	controller, file string
	set, unset       string
}

func (h *host) limitFiles(devs []string) map[[2]string]limitFile {
	// Throttle files list one line per device; v1 drops a device's line
	// when its limit is removed.
	defMem, defPids := h.defaultLimit("limits.memory"), h.defaultLimit("limits.processes")
	lines := func(v1value string) string {
		var ls []string
		for _, d := range devs {
			ls = append(ls, d+" "+v1value)
		}
		return strings.Join(ls, "\n")
	}
	if v2 {
		ioMax := func(f string) string {
			var ls []string
			for _, d := range devs {
				ls = append(ls, d+" "+f)
			}
			return strings.Join(ls, "\n")
		}
		return map[[2]string]limitFile{
			{"limits.cpu", "0.5"}:                {"", "cpu.max", "50000 100000", "max 100000"},
			{"limits.cpu.weight", "300"}:         {"", "cpu.weight", "300", "100"},
			{"limits.memory", "256MiB"}:          {"", "memory.max", "268435456", defMem},
			{"limits.processes", "100"}:          {"", "pids.max", "100", defPids},
			{"limits.disk.read", "20MB"}:         {"", "io.max", ioMax("rbps=20000000 wbps=max riops=max wiops=max"), ""},
			{"limits.disk.write", "10MiB/s"}:     {"", "io.max", ioMax("rbps=max wbps=10485760 riops=max wiops=max"), ""},
			{"limits.disk.read_iops", "500iops"}: {"", "io.max", ioMax("rbps=max wbps=max riops=500 wiops=max"), ""},
			{"limits.disk.write_iops", "400"}:    {"", "io.max", ioMax("rbps=max wbps=max riops=max wiops=400"), ""},
			{"limits.disk.weight", "500"}:        {"", "io.bfq.weight", "default 500", "default 100"},
		}
	}
	return map[[2]string]limitFile{
		{"limits.cpu", "0.5"}:                {"cpu", "cpu.cfs_quota_us", "50000", "-1"},
		{"limits.cpu.weight", "300"}:         {"cpu", "cpu.shares", "3072", "1024"},
		{"limits.memory", "256MiB"}:          {"memory", "memory.limit_in_bytes", "268435456", defMem},
		{"limits.processes", "100"}:          {"pids", "pids.max", "100", defPids},
		{"limits.disk.read", "20MB"}:         {"blkio", "blkio.throttle.read_bps_device", lines("20000000"), ""},
		{"limits.disk.write", "10MiB/s"}:     {"blkio", "blkio.throttle.write_bps_device", lines("10485760"), ""},
		{"limits.disk.read_iops", "500iops"}: {"blkio", "blkio.throttle.read_iops_device", lines("500"), ""},
		{"limits.disk.write_iops", "400"}:    {"blkio", "blkio.throttle.write_iops_device", lines("400"), ""},
		{"limits.disk.weight", "500"}:        {"blkio", "blkio.bfq.weight", "500", "100"},
	}
}

// sortedLines sorts a file's lines (the kernel lists devices in its own
// order).
func sortedLines(s string) string {
	ls := strings.Split(s, "\n")
	sort.Strings(ls)
	return strings.Join(ls, "\n")
}

// TestLimitsLive sets each key on a running container, reads the kernel's
// file back, and unsets it again.
func TestLimitsLive(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	devs := h.poolDevices()
	for kv, f := range h.limitFiles(devs) {
		h.OK("config", "set", "c1", kv[0]+"="+kv[1])
		if got := h.CgroupFile("c1", f.controller, f.file); sortedLines(got) != sortedLines(f.set) {
			t.Errorf("%s=%s: %s = %q, want %q", kv[0], kv[1], f.file, got, f.set)
		}
		if got := strings.TrimSpace(h.OK("config", "get", "c1", kv[0])); got != kv[1] {
			t.Errorf("config get %s = %q", kv[0], got)
		}
		h.OK("config", "unset", "c1", kv[0])
		if got := h.CgroupFile("c1", f.controller, f.file); got != f.unset {
			t.Errorf("unset %s: %s = %q, want %q", kv[0], f.file, got, f.unset)
		}
	}

	// Several keys at once; info shows them and the limit in force.
	h.OK("config", "set", "c1", "limits.memory=128MiB", "limits.processes=64", "limits.disk.weight=200", "user.note=hello")
	show := h.OK("config", "show", "c1")
	for _, want := range []string{"limits.memory: 128MiB", "limits.processes: 64", "user.note: hello"} {
		if !strings.Contains(show, want) {
			t.Errorf("config show lacks %q:\n%s", want, show)
		}
	}
	info := h.Instance("c1")
	if info.State == nil || info.State.MemoryLimit != 128<<20 {
		t.Fatalf("info state: %+v", info.State)
	}
	// A disk weight needs BFQ: vessel put it on the pool's loop device.
	var loopSched string
	for _, d := range h.ServerInfo().Host.StorageDevices {
		if strings.HasPrefix(d.Name, "loop") {
			loopSched = d.Scheduler
		}
	}
	if loopSched != "bfq" {
		t.Errorf("loop device scheduler = %q, want bfq", loopSched)
	}
	if out := h.OK("info", "c1"); !strings.Contains(out, "Memory limit:") || !strings.Contains(out, "OOM kills:") {
		t.Errorf("info:\n%s", out)
	}
}

// TestLimitsInvalid: bad values are refused with the accepted range, and
// nothing of a refused change is applied or saved.
func TestLimitsInvalid(t *testing.T) {
	h := newHost(t)
	h.Fails("between 1 and 10000", "launch", "busybox", "bad", "-c", "limits.cpu.weight=0")
	if _, ok := h.instances()["bad"]; ok {
		t.Errorf("a container with a bad limit was created")
	}
	h.OK("launch", "busybox", "c1", "-c", "limits.memory=64MiB")
	for _, c := range []struct{ kv, want string }{
		{"limits.memory=1MiB", "at least 4MiB"},
		{"limits.memory=lots", "not a size"},
		{"limits.cpu=0", "between 0.01 and 1024"},
		{"limits.processes=-3", "between 1 and 4194304"},
		{"limits.disk.read=5", "at least 1KiB"},
		{"limits.disk.write_iops=0", "between 1 and"},
		{"limits.disk.weight=5000", "between 1 and 1000"},
		{"limits.unknown=1", "unknown configuration key"},
	} {
		// Each bad value comes with a good one: neither is applied.
		h.Fails(c.want, "config", "set", "c1", "limits.processes=77", c.kv)
	}
	defPids := h.defaultLimit("limits.processes")
	if got := h.CgroupFile("c1", "pids", "pids.max"); got != defPids {
		t.Errorf("pids.max = %q after refused changes, want the default %s", got, defPids)
	}
	if got := h.OK("config", "show", "c1"); strings.Contains(got, "limits.processes: 77") {
		t.Errorf("refused change saved:\n%s", got)
	}

	if !v2 {
		// A limit the kernel refuses: 40 MiB in tmpfs cannot be reclaimed
		// (no swap), so v1 rejects a memory limit below it (EBUSY). The
		// pids limit set with it is rolled back. (v2 accepts such a
		// memory.max and OOM-kills instead: there is no refusal to test.)
		h.OK("exec", "c1", "--", "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", "count=40")
		r := h.Vessel("config", "set", "c1", "limits.processes=50", "limits.memory=8MiB")
		if r.Code == 0 {
			t.Fatalf("memory limit below unreclaimable usage accepted:\n%s", r)
		}
		if !strings.Contains(r.Stderr, "previous limits kept") {
			t.Errorf("error does not say the previous limits were kept:\n%s", r)
		}
		if got := h.CgroupFile("c1", "pids", "pids.max"); got != defPids {
			t.Errorf("pids.max = %q: half-applied", got)
		}
		if got := h.CgroupFile("c1", "memory", "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
			t.Errorf("memory limit = %q, want the previous 64MiB", got)
		}
		if got := h.OK("config", "show", "c1"); !strings.Contains(got, "limits.memory: 64MiB") || !strings.Contains(got, "limits.processes: "+defPids+" (host default)") {
			t.Errorf("config after refused change:\n%s", got)
		}
	}
}

// TestLimitsPersist: limits set at launch and live survive a container
// restart and a daemon restart, and a daemon restart repairs a limit
// changed behind its back.
func TestLimitsPersist(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1", "-c", "limits.memory=128MiB", "-c", "limits.cpu=0.5")
	h.OK("config", "set", "c1", "limits.processes=64")
	memFile, want := "memory.limit_in_bytes", strconv.Itoa(128<<20)
	if v2 {
		memFile = "memory.max"
	}
	check := func(when string) {
		t.Helper()
		if got := h.CgroupFile("c1", "memory", memFile); got != want {
			t.Errorf("%s: %s = %q, want %q", when, memFile, got, want)
		}
		if got := h.CgroupFile("c1", "pids", "pids.max"); got != "64" {
			t.Errorf("%s: pids.max = %q", when, got)
		}
	}
	check("after launch and set")
	h.OK("restart", "--force", "c1")
	check("after container restart")

	// A stopped container takes new limits at its next start.
	h.OK("stop", "--force", "c1")
	h.OK("config", "set", "c1", "limits.processes=32")
	h.OK("start", "c1")
	if got := h.CgroupFile("c1", "pids", "pids.max"); got != "32" {
		t.Errorf("limit set while stopped: pids.max = %q", got)
	}
	h.OK("config", "set", "c1", "limits.processes=64")

	// Someone changes a limit while the daemon is down; the restarted
	// daemon writes the configured limits again.
	h.StopDaemon()
	dir := filepath.Join("/sys/fs/cgroup", h.CgroupParent(), "c1")
	if !v2 {
		dir = filepath.Join("/sys/fs/cgroup", "pids", h.CgroupParent(), "c1")
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("max"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.Start()
	check("after daemon restart")
}

// TestMemoryLimitOOM: an allocation beyond limits.memory is OOM-killed and
// reported, and the container keeps running.
func TestMemoryLimitOOM(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1", "-c", "limits.memory=32MiB")
	// awk doubles a string until it holds more than the limit.
	r := h.Vessel("exec", "c1", "--", "awk", `BEGIN { s = "x"; for (;;) s = s s }`)
	if r.Code != 137 {
		t.Errorf("allocation beyond the limit: %s (want killed, exit 137)", r)
	}
	i := h.Instance("c1")
	if i.Status != api.StatusRunning || i.State == nil || i.State.OOMKills < 1 {
		t.Fatalf("after OOM: status %s, state %+v", i.Status, i.State)
	}
	if out := h.OK("info", "c1"); !strings.Contains(out, "OOM kills:") {
		t.Errorf("info:\n%s", out)
	}
	if got := i.State.MemoryLimit; got != 32<<20 {
		t.Errorf("memory limit = %d", got)
	}
}

// TestProcessLimit: forks beyond limits.processes fail.
func TestProcessLimit(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1", "-c", "limits.processes=20")
	// The shell dies when a fork fails ("can't fork"); the sleeps it did
	// start hold no pipe of the exec session open.
	r := h.Vessel("exec", "c1", "--", "sh", "-c",
		`for i in $(seq 1 40); do sleep 300 </dev/null >/dev/null 2>&1 & done; echo all-started`)
	if r.Code == 0 || strings.Contains(r.Stdout, "all-started") {
		t.Errorf("40 processes started under limits.processes=20: %s", r)
	}
	st := h.CgroupFile("c1", "pids", "pids.events")
	var hits int
	if _, err := fmt.Sscanf(st, "max %d", &hits); err != nil || hits == 0 {
		t.Errorf("pids.events = %q: no fork was refused", st)
	}
	if i := h.Instance("c1"); i.State == nil || i.State.Processes > 20 {
		t.Errorf("processes = %+v", i.State)
	}
}

// TestControlCgroup: vesseld runs in its control cgroup with 10x the
// containers' CPU weight; shims run on the containers' side; the weight can
// be turned off by a restart; nothing is left behind (teardown checks).
func TestControlCgroup(t *testing.T) {
	h := newHost(t)
	control := h.CgroupParent() + "-control"
	sh := h.ServerInfo().Host.Control
	if sh.Cgroup != control || sh.CPUWeight != 1000 || sh.ContainersCPUWeight != 100 {
		t.Errorf("host info control = %+v", sh)
	}
	pid := h.daemonPid()
	if got, err := cgroups.ProcessCgroup(pid, "cpu"); err != nil || got != control {
		t.Errorf("vesseld's cpu cgroup = %q, %v; want %q", got, err, control)
	}
	weightFile, on, off := "cpu.shares", "10240", "1024"
	if v2 {
		weightFile, on, off = "cpu.weight", "1000", "100"
	}
	if got := h.CgroupFileAt(control, "cpu", weightFile); got != on {
		t.Errorf("control %s = %q, want %q", weightFile, got, on)
	}
	if got := h.CgroupFileAt(h.CgroupParent(), "cpu", weightFile); got != off {
		t.Errorf("containers' parent %s = %q, want %q", weightFile, got, off)
	}

	h.OK("launch", "busybox", "c1")
	i := h.Instance("c1")
	shim := parentPid(t, i.PID)
	if got, _ := cgroups.ProcessCgroup(shim, "cpu"); got != h.CgroupParent()+"/_shims" {
		t.Errorf("shim %d is in %q, want the containers' side", shim, got)
	}
	if got, _ := cgroups.ProcessCgroup(i.PID, "cpu"); got != h.CgroupParent()+"/c1" {
		t.Errorf("init is in %q", got)
	}
	// A container starts with the control weight; once init runs it has
	// its own (default, or configured).
	if got := h.CgroupFile("c1", "cpu", weightFile); got != off {
		t.Errorf("running container's %s = %q, want %q", weightFile, got, off)
	}
	h.OK("launch", "busybox", "c2", "-c", "limits.cpu.weight=50")
	want50 := "512"
	if v2 {
		want50 = "50"
	}
	if got := h.CgroupFile("c2", "cpu", weightFile); got != want50 {
		t.Errorf("container with weight 50: %s = %q, want %q", weightFile, got, want50)
	}

	h.RestartWith("--control-cpu-weight=0")
	if got := h.CgroupFileAt(control, "cpu", weightFile); got != off {
		t.Errorf("weight off: control %s = %q, want %q", weightFile, got, off)
	}
	if got, _ := cgroups.ProcessCgroup(h.daemonPid(), "cpu"); got != control {
		t.Errorf("after restart vesseld is in %q", got)
	}
}

// daemonPid reads ROOT/vesseld.pid.
func (h *host) daemonPid() int {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root(), "vesseld.pid"))
	if err != nil {
		h.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		h.t.Fatal(err)
	}
	return pid
}

// parentPid returns a process's parent pid.
func parentPid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut after ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// TestMetrics scrapes /1.0/metrics and finds the running container's usage.
func TestMetrics(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	h.OK("exec", "c1", "--", "dd", "if=/dev/zero", "of=/big", "bs=1M", "count=8", "oflag=direct")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", h.Socket())
	}}}
	resp, err := hc.Get("http://vessel/1.0/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	text := string(body)
	for _, want := range []string{
		`vessel_instances{status="running"} 1`,
		`vessel_instance_cpu_seconds_total{instance="c1"}`,
		`vessel_instance_memory_bytes{instance="c1"}`,
		`vessel_instance_processes{instance="c1"}`,
		`vessel_instance_oom_kills_total{instance="c1"} 0`,
		`vessel_instance_io_write_bytes_total{device="`,
		"# TYPE vessel_instance_io_write_operations_total counter",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	// The direct write reached the loop device: at least 8 MiB written.
	var loopWritten float64
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `vessel_instance_io_write_bytes_total{device="loop`) {
			f := strings.Fields(line)
			loopWritten, _ = strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	if loopWritten < 8<<20 {
		t.Errorf("loop device write bytes = %v, want >= 8MiB:\n%s", loopWritten, text)
	}
}
