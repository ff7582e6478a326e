package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
)

func TestCgroupYard(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "cgroup")
	if err := os.WriteFile(proc, []byte("3:name=systemd:/\n2:cpu,cpuacct:/x\n1:memory:/\n0::/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mounts := []*mountinfo.Info{
		{Mountpoint: "/sys/fs/cgroup", FSType: "tmpfs", Root: "/", VFSOptions: "rw"},
		{Mountpoint: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Root: "/", VFSOptions: "rw,cpu,cpuacct"},
		{Mountpoint: "/elsewhere/memory", FSType: "cgroup", Root: "/sub", VFSOptions: "rw,memory"},
		{Mountpoint: "/sys/fs/cgroup/memory", FSType: "cgroup", Root: "/", VFSOptions: "rw,memory"},
		{Mountpoint: "/sys/fs/cgroup/systemd", FSType: "cgroup", Root: "/", VFSOptions: "rw,name=systemd"},
		{Mountpoint: "/sys/fs/cgroup/unified", FSType: "cgroup2", Root: "/", VFSOptions: "rw"},
	}
	yard := filepath.Join(dir, "yard")
	if err := makeCgroupYard(yard, proc, mounts); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"systemd": "/sys/fs/cgroup/systemd", "cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"memory": "/sys/fs/cgroup/memory", "unified": "/sys/fs/cgroup/unified",
	} {
		if got, err := os.Readlink(filepath.Join(yard, name)); err != nil || got != want {
			t.Errorf("yard/%s -> %q %v, want %q", name, got, err, want)
		}
	}
	// A hierarchy that is not mounted: no yard (CRIU mounts its own).
	if err := os.WriteFile(proc, []byte("5:pids:/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := makeCgroupYard(yard, proc, mounts); err == nil {
		t.Error("a yard without the pids hierarchy")
	}
}
