package cgroups

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestFreezeForkingProcess freezes a cgroup whose process forks without
// pause (the case runc's retry loop was written for): the freeze ends
// FROZEN and nothing in the cgroup runs until the thaw.
func TestFreezeForkingProcess(t *testing.T) {
	path := testPath(t)
	m, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := New(path[:len(path)-len("/c1")])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Thaw(); _ = m.Destroy(); _ = parent.Destroy() })
	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "while :; do /bin/true; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Thaw(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := m.(*cgroup).m.Apply(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if err := m.Freeze(ctx); err != nil {
			t.Fatalf("freeze %d: %v", i, err)
		}
		st, _ := m.(*cgroup).m.GetFreezerState()
		if st != "FROZEN" {
			t.Fatalf("freeze %d: state %q", i, st)
		}
		before, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		after, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if after.CPUUsage != before.CPUUsage || after.Pids != before.Pids {
			t.Fatalf("freeze %d: the cgroup ran while frozen: cpu %d -> %d ns, pids %d -> %d",
				i, before.CPUUsage, after.CPUUsage, before.Pids, after.Pids)
		}
		if err := m.Thaw(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
