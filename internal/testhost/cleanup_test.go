package testhost

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// mkdirs makes each directory under root.
func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// The leak check finds a host's cgroups, its control cgroup included, on a
// cgroup v2 host (the hierarchy's root is the mount point itself) as on a
// v1 or hybrid one (a root per controller, and the unified tree).
func TestCgroupDirs(t *testing.T) {
	const parent = "/vessel-vtabc123-beta"
	v2 := t.TempDir()
	mkdirs(t, v2, "system.slice", "vessel-vtabc123-beta-control", "vessel-vtother-beta")
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := cgroupRoots(v2), []string{v2}; !slices.Equal(got, want) {
		t.Fatalf("v2 roots %v, want %v", got, want)
	}
	if got, want := cgroupDirsIn(cgroupRoots(v2), parent), []string{filepath.Join(v2, "vessel-vtabc123-beta-control")}; !slices.Equal(got, want) {
		t.Errorf("v2: %v, want %v", got, want)
	}

	v1 := t.TempDir()
	mkdirs(t, v1, "cpu,cpuacct/vessel-vtabc123-beta-control", "cpu,cpuacct/vessel-vtabc123-beta/c1",
		"memory/vessel-vtabc123-beta", "unified/vessel-vtabc123-beta-control", "pids")
	want := []string{
		filepath.Join(v1, "cpu,cpuacct/vessel-vtabc123-beta"),
		filepath.Join(v1, "cpu,cpuacct/vessel-vtabc123-beta-control"),
		filepath.Join(v1, "memory/vessel-vtabc123-beta"),
		filepath.Join(v1, "unified/vessel-vtabc123-beta-control"),
	}
	if got := cgroupDirsIn(cgroupRoots(v1), parent); !slices.Equal(got, want) {
		t.Errorf("v1: %v, want %v", got, want)
	}
	if got := cgroupDirsIn(cgroupRoots(v1), "/"); got != nil {
		t.Errorf("parent /: %v, want none", got)
	}
}
