package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// instances returns `vessel list --format json`.
func (h *host) instances() map[string]api.Instance {
	h.t.Helper()
	var list []api.Instance
	if err := json.Unmarshal([]byte(h.OK("list", "--format", "json")), &list); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]api.Instance{}
	for _, i := range list {
		out[i.Name] = i
	}
	return out
}

// eventually polls cond for up to 30 s; lifecycle events (a shim noticing
// an exit) are asynchronous. Not a timing assertion: only a bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 30*time.Second, what, cond)
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLifecycle(t *testing.T) {
	h := newHost(t)

	h.OK("launch", "busybox", "c1")
	i := h.instances()["c1"]
	if i.Status != api.StatusRunning || i.IPv4 == "" || i.PID == 0 {
		t.Fatalf("after launch: %+v", i)
	}
	if i.OS.ID != "busybox" {
		t.Errorf("distro = %+v, want busybox", i.OS)
	}
	table := h.OK("list")
	for _, want := range []string{"c1", "Running", i.IPv4, "busybox"} {
		if !strings.Contains(table, want) {
			t.Errorf("list table lacks %q:\n%s", want, table)
		}
	}
	csv := h.OK("list", "--format", "csv")
	if !strings.HasPrefix(csv, "NAME,TYPE,STATUS,IPV4") || !strings.Contains(csv, "c1,CONTAINER,Running,"+i.IPv4) {
		t.Errorf("csv:\n%s", csv)
	}
	if y := h.OK("list", "--format", "yaml"); !strings.Contains(y, "name: c1") {
		t.Errorf("yaml:\n%s", y)
	}

	// Inside: hostname, its own address, PID 1 is the image's init.
	if got := strings.TrimSpace(h.OK("exec", "c1", "--", "hostname")); got != "c1" {
		t.Errorf("hostname = %q", got)
	}
	if got := h.OK("exec", "c1", "--", "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, i.IPv4+"/24") {
		t.Errorf("eth0:\n%s", got)
	}
	if got := h.OK("exec", "c1", "--", "cat", "/proc/1/cmdline"); !strings.Contains(got, "init") {
		t.Errorf("pid 1 = %q", got)
	}
	// Exit codes propagate; stdin reaches the command.
	if r := h.Vessel("exec", "c1", "--", "sh", "-c", "exit 7"); r.Code != 7 {
		t.Errorf("exit code %d, want 7", r.Code)
	}
	if r := h.Vessel("exec", "c1", "--", "nonexistent-binary"); r.Code == 0 {
		t.Errorf("missing binary exited 0")
	}
	if r := h.VesselIn("hello from stdin\n", "exec", "c1", "--", "cat"); r.Code != 0 || r.Stdout != "hello from stdin\n" {
		t.Errorf("stdin echo: %s", r)
	}
	if r := h.Vessel("exec", "c1", "--", "sh", "-c", "echo out; echo err >&2"); r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("stdout/stderr split: %s", r)
	}
	if r := h.Vessel("exec", "c1", "--env", "FOO=bar", "--", "sh", "-c", "echo $FOO"); r.Stdout != "bar\n" {
		t.Errorf("--env: %s", r)
	}

	// Live usage from the cgroup.
	info := h.Instance("c1")
	if info.State == nil || info.State.Processes == 0 || info.State.MemoryUsage == 0 {
		t.Errorf("info state: %+v", info.State)
	}
	if out := h.OK("info", "c1"); !strings.Contains(out, "Memory:") {
		t.Errorf("info table:\n%s", out)
	}

	// The console log holds init's boot output.
	eventually(t, "boot banner in console log", func() bool {
		return strings.Contains(h.OK("console", "c1"), "c1")
	})

	// Graceful stop through init's shutdown path.
	h.OK("stop", "c1")
	i = h.instances()["c1"]
	if i.Status != api.StatusStopped || i.PID != 0 {
		t.Fatalf("after stop: %+v", i)
	}
	if log := h.OK("console", "c1"); !strings.Contains(strings.ToLower(log), "shutting down") {
		t.Errorf("console log has no shutdown output:\n%s", log)
	}
	if e := h.Instance("c1").LastExit; e == nil {
		t.Errorf("no last exit recorded")
	}
	h.Fails("not running", "stop", "c1")
	h.Fails("not running", "exec", "c1", "--", "true")

	// Start keeps the address; restart gives a new init.
	h.OK("start", "c1")
	j := h.instances()["c1"]
	if j.Status != api.StatusRunning || j.IPv4 != i.IPv4 {
		t.Fatalf("after start: %+v (address was %s)", j, i.IPv4)
	}
	h.Fails("already running", "start", "c1")
	h.OK("restart", "c1")
	k := h.instances()["c1"]
	if k.Status != api.StatusRunning || k.PID == j.PID {
		t.Fatalf("after restart: %+v (old pid %d)", k, j.PID)
	}
	// Forced stop kills at once.
	h.OK("stop", "--force", "c1")
	h.OK("start", "c1")

	// Delete refuses a running container without --force.
	h.Fails("--force", "delete", "c1")
	if h.instances()["c1"].Status != api.StatusRunning {
		t.Fatal("refused delete changed the container")
	}
	h.OK("delete", "--force", "c1")
	if _, ok := h.instances()["c1"]; ok {
		t.Fatal("c1 still listed after delete")
	}
	h.assertNoInstanceTraces("c1")
}

// assertNoInstanceTraces checks that a deleted instance left no volume,
// netns, veth, cgroup, bundle or runc state behind.
func (h *host) assertNoInstanceTraces(name string) {
	h.t.Helper()
	paths := []string{
		filepath.Join(h.Root(), "storage-pools", "default", "containers", name),
		filepath.Join(h.RunDir(), "netns", name),
		filepath.Join(h.Root(), "containers", name),
		filepath.Join(h.RunDir(), "shims", name),
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			h.t.Errorf("%s still exists", p)
		}
	}
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, c := range ctrls {
		if _, err := os.Stat(filepath.Join(c, h.CgroupParent(), name)); err == nil {
			h.t.Errorf("cgroup %s still exists", filepath.Join(c, h.CgroupParent(), name))
		}
	}
	for _, id := range h.RuncContainers() {
		if id == name {
			h.t.Errorf("runc still knows %s", name)
		}
	}
	links, _ := os.ReadDir("/sys/class/net/" + h.Bridge() + "/brif")
	if len(links) != 0 && len(h.instances()) == 0 {
		h.t.Errorf("bridge %s still has ports: %v", h.Bridge(), links)
	}
}

func TestDaemonRestartKeepsContainers(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "keep")
	h.OK("launch", "busybox", "dies")
	h.OK("create", "busybox", "off")
	before := h.instances()

	// A clean restart: containers keep running, same init, still usable.
	h.RestartDaemon()
	after := h.instances()
	for _, n := range []string{"keep", "dies"} {
		if after[n].Status != api.StatusRunning || after[n].PID != before[n].PID {
			t.Fatalf("%s after restart: %+v, before %+v", n, after[n], before[n])
		}
	}
	if after["off"].Status != api.StatusStopped {
		t.Fatalf("off after restart: %+v", after["off"])
	}
	if got := strings.TrimSpace(h.OK("exec", "keep", "--", "hostname")); got != "keep" {
		t.Errorf("exec after restart: %q", got)
	}

	// A crash while a container dies: it is shown stopped afterwards and
	// can start again.
	h.KillDaemon()
	if err := syscall.Kill(before["dies"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.Start()
	after = h.instances()
	if after["dies"].Status != api.StatusStopped {
		t.Fatalf("container that died while the daemon was down: %+v", after["dies"])
	}
	if after["keep"].Status != api.StatusRunning || after["keep"].PID != before["keep"].PID {
		t.Fatalf("keep after crash restart: %+v", after["keep"])
	}
	h.OK("start", "dies")
	// An exit seen live (init killed from outside) is noticed too.
	cur := h.instances()["dies"]
	if err := syscall.Kill(cur.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dies to be shown stopped", func() bool { return h.instances()["dies"].Status == api.StatusStopped })
	h.OK("start", "dies")
}

// parallel runs `vessel ARGS... parI` for I in 0..n-1 all at once and
// reports each failure.
func (h *host) parallel(n int, args ...string) {
	h.t.Helper()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			name := fmt.Sprintf("par%d", i)
			if r := h.Vessel(append(append([]string{}, args...), name)...); r.Code != 0 {
				errs <- fmt.Errorf("%s %s: %s", args[0], name, r)
				return
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			h.t.Error(err)
		}
	}
}

func TestConcurrentLaunches(t *testing.T) {
	h := newHost(t)
	const n = 10
	h.parallel(n, "launch", "busybox")
	if t.Failed() {
		t.FailNow()
	}
	insts := h.instances()
	seen := map[string]string{}
	for i := 0; i < n; i++ {
		inst := insts[fmt.Sprintf("par%d", i)]
		if inst.Status != api.StatusRunning {
			t.Errorf("%s: %+v", inst.Name, inst)
		}
		if other, dup := seen[inst.IPv4]; dup {
			t.Errorf("%s and %s share %s", inst.Name, other, inst.IPv4)
		}
		seen[inst.IPv4] = inst.Name
	}
	// Containers reach each other and the host's bridge address.
	gw := strings.TrimSuffix(h.Subnet().Addr().String(), "0") + "1"
	for _, target := range []string{insts["par9"].IPv4, gw} {
		if r := h.Ping("par0", target); r.Code != 0 {
			t.Errorf("par0 cannot reach %s: %s", target, r)
		}
	}
	// Ten deletes at once too.
	h.parallel(n, "delete", "--force")
	if left := h.instances(); len(left) != 0 {
		t.Fatalf("left after delete: %v", left)
	}
	for i := 0; i < n; i++ {
		h.assertNoInstanceTraces(fmt.Sprintf("par%d", i))
	}
}

func TestNoLeftoversAfterDaemonStop(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "temp")
	h.OK("delete", "--force", "temp")
	h.StopDaemon()
	if l := h.Leftovers(); len(l) != 0 {
		t.Fatalf("after delete and daemon stop: %v", l)
	}
	// And a fresh start sets everything up again.
	h.Start()
	h.OK("launch", "busybox", "again")
}

// TestControlCgroupLeftover: a process still in vesseld's control cgroup
// when it stops (a helper that outlived it, as a stuck CRIU once did) keeps
// that cgroup; the teardown's leak check names it, on cgroup v1 and v2
// alike, and the forced cleanup kills the process and removes the cgroup.
func TestControlCgroupLeftover(t *testing.T) {
	h := newHost(t)
	ctrl := h.CgroupParent() + "-control"
	var dirs []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dirs = []string{"/sys/fs/cgroup" + ctrl}
	} else {
		dirs, _ = filepath.Glob("/sys/fs/cgroup/*" + ctrl)
	}
	if len(dirs) == 0 {
		t.Fatalf("no control cgroup %s", ctrl)
	}
	helper := exec.Command("sleep", "600")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = helper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = helper.Process.Kill(); <-exited })
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(fmt.Sprint(helper.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.StopDaemon()
	found := false
	for _, l := range h.Leftovers() {
		found = found || (strings.HasPrefix(l, "cgroup ") && strings.HasSuffix(l, ctrl))
	}
	if !found {
		t.Fatalf("leak check misses the control cgroup %s with a process in it: %v", ctrl, h.Leftovers())
	}
	h.ForceCleanup()
	if l := h.Leftovers(); len(l) != 0 {
		t.Fatalf("after the forced cleanup: %v", l)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process in the control cgroup still runs after the forced cleanup")
	}
}

// TestDirStorageDriver runs a container on the dir driver (hosts without
// btrfs): a full copy per container instead of a snapshot.
func TestDirStorageDriver(t *testing.T) {
	h := &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: []string{"--storage-driver", "dir"}}), t: t}
	if out := h.OK("storage", "info"); !strings.Contains(out, "dir") || !strings.Contains(out, "false") {
		t.Fatalf("storage info:\n%s", out)
	}
	h.OK("launch", "busybox", "plain")
	h.OK("exec", "plain", "--", "sh", "-c", "echo changed > /etc/motd")
	h.OK("launch", "busybox", "other")
	if r := h.Vessel("exec", "other", "--", "cat", "/etc/motd"); r.Code == 0 {
		t.Fatalf("a copy shares files with another container: %s", r)
	}
	h.OK("delete", "--force", "plain")
	h.assertNoInstanceTraces("plain")
}
