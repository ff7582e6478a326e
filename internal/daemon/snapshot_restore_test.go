package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
)

// TestStatefulRestorePrepared: a stateful restore prepares the restore
// (network, shim and CRIU: PrepareRestore) beside the disk's rollback and
// runs it once both are done. A failed preparation leaves the disk rolled
// back and nothing prepared; a failed rollback ends the prepared restore
// (Abort) and what prepareRun made.
func TestStatefulRestorePrepared(t *testing.T) {
	setup := func(t *testing.T) *testDaemon {
		td := newTestDaemon(t)
		td.addRunning(t, "c1")
		td.putStatefulSnapshot(t, "c1", "s1", "c1 at s1", "memory")
		putCheckpointImages(t, td, checkpointVolume("c1", "s1"), "c1")
		return td
	}
	restore := func(t *testing.T, td *testDaemon) (map[string]any, error) {
		t.Helper()
		op, err := td.RestoreSnapshot(context.Background(), "c1", "s1", api.SnapshotRestorePost{Stateful: true, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		err = waitOp(t, op)
		return op.Render().Metadata, err
	}
	stopped := func(t *testing.T, td *testDaemon) {
		t.Helper()
		if st := td.status(t, "c1"); st != api.StatusStopped {
			t.Errorf("c1 is %s after the failed restore, want Stopped", st)
		}
		if _, ok := td.fnet.attached["c1"]; ok {
			t.Error("the failed restore left c1's network attached")
		}
		if n := td.frt.count("Restore c1"); n != 0 {
			t.Errorf("CRIU was asked %d times", n)
		}
	}

	t.Run("ok", func(t *testing.T) {
		td := setup(t)
		md, err := restore(t, td)
		if err != nil {
			t.Fatal(err)
		}
		if st := td.status(t, "c1"); st != api.StatusRunning {
			t.Fatalf("c1 is %s, want Running", st)
		}
		if got := td.readVolume(t, containerVolume("c1")); got != "c1 at s1" {
			t.Errorf("disk after the restore: %q", got)
		}
		if p, r := td.frt.count("PrepareRestore c1"), td.frt.count("Restore c1"); p != 1 || r != 1 {
			t.Errorf("PrepareRestore %d, Restore %d times; want once each", p, r)
		}
		for _, k := range []string{"restore_ms", "disk_ms", "prepare_ms"} {
			if _, ok := md[k].(float64); !ok {
				t.Errorf("metadata %s: %v", k, md[k])
			}
		}
	})
	t.Run("prepare fails", func(t *testing.T) {
		td := setup(t)
		td.frt.prepareErr = errors.New("no CRIU today")
		if _, err := restore(t, td); err == nil || !errors.Is(err, td.frt.prepareErr) {
			t.Fatalf("restore: %v, want the preparation's error", err)
		}
		stopped(t, td)
		// The rollback beside it went on to the end.
		if got := td.readVolume(t, containerVolume("c1")); got != "c1 at s1" {
			t.Errorf("disk after the failed restore: %q, want the snapshot's", got)
		}
		if rec, _ := td.storedInstance(t, "c1"); rec.RollingBack != "" {
			t.Errorf("the record still says rolling back to %q", rec.RollingBack)
		}
	})
	t.Run("rollback fails", func(t *testing.T) {
		td := setup(t)
		if err := td.storage.DeleteVolume(context.Background(), snapshotVolume("c1", "s1")); err != nil {
			t.Fatal(err)
		}
		if _, err := restore(t, td); err == nil {
			t.Fatal("restore without the snapshot's disk succeeded")
		}
		stopped(t, td)
		if n := td.frt.count("Abort c1"); n != 1 {
			t.Errorf("the prepared restore was aborted %d times, want once", n)
		}
		if rec, _ := td.storedInstance(t, "c1"); rec.State != state.StateStopped {
			t.Errorf("record state %s", rec.State)
		}
	})
}
