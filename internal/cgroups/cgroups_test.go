package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func testPath(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("/vessel-test-%d-%d/c1", os.Getpid(), time.Now().UnixNano()%100000)
}

func TestNewRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "rel/path", "/a/../b", "/"} {
		if _, err := New(p); err == nil {
			t.Errorf("New(%q) succeeded", p)
		}
	}
}

func TestLifecycle(t *testing.T) {
	path := testPath(t)
	m, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := New(path[:len(path)-len("/c1")])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(); _ = parent.Destroy() })

	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	if err := m.Create(); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if !m.Exists() {
		t.Fatal("cgroup does not exist after Create")
	}

	// Move a real process in through cgroup.procs and watch it freeze.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := m.(*cgroup).m.Apply(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := m.Pids()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("Pids = %v, %v; want %d in it", pids, err, cmd.Process.Pid)
	}
	got, err := ProcessCgroup(cmd.Process.Pid, "memory")
	if err != nil || got != path {
		t.Fatalf("ProcessCgroup = %q, %v; want %q", got, err, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Thaw(); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids != 1 {
		t.Errorf("Stats.Pids = %d, want 1", st.Pids)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := m.Destroy(); err != nil {
		t.Fatal(err)
	}
	if m.Exists() {
		t.Fatal("cgroup exists after Destroy")
	}
	if err := m.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}
