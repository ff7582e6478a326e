package cgroups

import (
	"slices"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/vesselhost/vessel/internal/testutil"
)

func TestRootOptions(t *testing.T) {
	got := rootOptions("rw,seclabel,nsdelegate,memory_recursiveprot,favordynmods")
	want := []string{"nsdelegate", "memory_recursiveprot", "favordynmods"}
	if !slices.Equal(got, want) {
		t.Fatalf("rootOptions = %v, want %v", got, want)
	}
	if got := rootOptions("rw"); got != nil {
		t.Fatalf("rootOptions(rw) = %v, want none", got)
	}
}

// TestFavorDynMods turns the option on and checks that the host's other
// root options survive, then puts the mount back as it was.
func TestFavorDynMods(t *testing.T) {
	m := cgroup2Mount(t)
	before := rootOptions(m.VFSOptions)
	t.Cleanup(func() {
		if err := setRootOptions(m.Mountpoint, before); err != nil {
			t.Errorf("restore %s options %v: %v", m.Mountpoint, before, err)
		}
	})
	// Start from a known state: memory_recursiveprot on (what systemd
	// sets), favordynmods off.
	if err := setRootOptions(m.Mountpoint, []string{"memory_recursiveprot"}); err != nil {
		t.Fatal(err)
	}
	mp, err := FavorDynMods()
	if err != nil {
		t.Fatal(err)
	}
	if mp != m.Mountpoint {
		t.Fatalf("FavorDynMods reconfigured %q, want %q", mp, m.Mountpoint)
	}
	got := rootOptions(cgroup2Mount(t).VFSOptions)
	for _, o := range []string{"memory_recursiveprot", "favordynmods"} {
		if !slices.Contains(got, o) {
			t.Errorf("after FavorDynMods the root options are %v: %s missing", got, o)
		}
	}
	if mp, err := FavorDynMods(); err != nil || mp != "" {
		t.Errorf("second FavorDynMods = %q, %v; want nothing to do", mp, err)
	}
}

func cgroup2Mount(t *testing.T) *mountinfo.Info {
	t.Helper()
	testutil.NeedRoot(t)
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		t.Skip("this host mounts no cgroup2 tree")
	}
	return mounts[0]
}
