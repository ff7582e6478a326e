package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cgroupimg "github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// TestCheckpointOneCgroupSet dumps a container of three tasks in the same
// cgroups (CRIU patch 0029): the images hold one cgroup set, which every
// task names, and the restore moves only init into it (the others are
// born there). Upstream CRIU made a set for each task but the first (a
// stray took the cgroup namespace's prefix only after its set was looked
// up), dumped each one's properties again and moved each task into its
// cgroups again, one usernsd round trip per controller, while frozen.
// And init is not moved into a cgroup it was born in (patch 0032: the
// restore's CRIU runs in the container's cgroups), yet every task ends
// up in the container's cgroup of every hierarchy.
func TestCheckpointOneCgroupSet(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "cgs1"
	bundle := e.bundle(id, "/bin/sh", "-c", "sleep 1000 & sleep 1000 & touch /tmp/ready; wait")
	if _, err := e.rt.Start(ctx, id, bundle, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	cg := e.cgroup(id)
	waitFor(t, "three tasks", func() bool {
		_, err := os.Stat(filepath.Join(e.rootfs, "tmp/ready"))
		return err == nil && len(e.pids(cg)) == 3
	})
	images, work := filepath.Join(e.dir, "ckpt"), filepath.Join(e.dir, "ckpt-work")
	ck, err := e.rt.NewCheckpoint(ctx, id, CheckpointOptions{ImagePath: images, WorkPath: work,
		Pages: &imgstream.DirSink{Dir: images}, LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Abort)
	e.freeze(cg)
	if err := ck.Run(); err != nil {
		t.Fatal(err)
	}
	if err := ck.Wait(); err != nil {
		t.Fatal(err)
	}

	var cgs cgroupimg.CgroupEntry
	if err := readImage(filepath.Join(images, "cgroup.img"), &cgs, nil); err != nil {
		t.Fatal(err)
	}
	if len(cgs.GetSets()) != 1 {
		t.Fatalf("cgroup.img holds %d sets, want 1 (the container's): %v", len(cgs.GetSets()), cgs.GetSets())
	}
	set := cgs.GetSets()[0].GetId()
	cores, _ := filepath.Glob(filepath.Join(images, "core-*.img"))
	if len(cores) != 3 {
		t.Fatalf("%d core images, want 3: %v", len(cores), cores)
	}
	for _, f := range cores {
		err := readImage(f, &criucore.CoreEntry{}, func(m proto.Message) error {
			if got := m.(*criucore.CoreEntry).GetThreadCore().GetCgSet(); got != set {
				t.Errorf("%s: cgroup set %d, want %d", filepath.Base(f), got, set)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The dumped container goes, its copy comes back from the images.
	exits, err := e.rt.Watch(id)
	if err != nil {
		t.Fatal(err)
	}
	e.killDelete(id, exits)
	rwork := filepath.Join(e.dir, "restore-work")
	if _, err := e.rt.Restore(ctx, id, bundle, RestoreOptions{ImagePath: images, WorkPath: rwork}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.pids(e.cgroup(id))); n != 3 {
		t.Errorf("%d tasks restored, want 3", n)
	}
	// Only init is moved: its children are born in its cgroups.
	log, err := os.ReadFile(filepath.Join(rwork, "restore.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "inherited from parent"); n != 2 {
		t.Errorf("restore.log: %d tasks inherited their cgroups, want 2", n)
	}
	if !strings.Contains(string(log), "`-> already in ") {
		t.Error("restore.log: init was moved into every cgroup it was born in")
	}
	for _, d := range cgroupDirs(e.cgroups + "/" + id) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if os.IsNotExist(err) {
			continue // a hierarchy runc puts no container in
		} else if err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Fields(string(b))); n != 3 {
			t.Errorf("%s holds %d tasks, want the 3 restored", d, n)
		}
	}
	if err := e.rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.checkGone(id)
}
