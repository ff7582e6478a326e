package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// The reconcile tests prepare the store, the pool and the fakes as a
// daemon killed at some point would have left them, start a daemon on
// them and check what it made of each instance.

// TestReconcileAdoptsInterruptedStart: a daemon killed between launching
// a container and committing the start left a record "stopped" and a
// running container: the new daemon adopts it.
func TestReconcileAdoptsInterruptedStart(t *testing.T) {
	td := newTestDaemon(t)
	rec := td.putInstance(t, "c1", state.StateStopped, func(r *state.Instance) {
		r.Config = map[string]string{"limits.memory": "256MiB"}
	})
	pid := td.frt.run("c1")
	td.fnet.attach("c1", rec.Address, true)

	td.startDaemon(t)

	inst := td.insts.get("c1")
	run := inst.live()
	if run == nil || run.proc.InitPid != pid {
		t.Fatalf("live handle %+v, want init pid %d", run, pid)
	}
	if got := inst.record().State; got != state.StateRunning {
		t.Errorf("record in memory says %q, want running", got)
	}
	if got, _ := td.storedInstance(t, "c1"); got.State != state.StateRunning || got.LastStart.IsZero() {
		t.Errorf("stored record: state %q, last start %v; want running, set", got.State, got.LastStart)
	}
	sets := td.cgroup("c1").sets
	if len(sets) == 0 || sets[len(sets)-1].MemoryMax != 256<<20 {
		t.Errorf("limits written at adoption: %+v, want memory 256MiB", sets)
	}
	if n := td.fnet.count("Detach c1"); n != 0 {
		t.Errorf("network detached %d times", n)
	}
	if n := td.fnet.count("Guard c1 " + rec.Address.String()); n != 1 {
		t.Errorf("port filter guarded %d times with %s, want once", n, rec.Address)
	}
	if attached, up := td.fnet.isAttached("c1"); !attached || !up {
		t.Errorf("network attached %v, link up %v", attached, up)
	}
	if n := td.frt.count("Delete c1"); n != 0 {
		t.Errorf("runtime state deleted %d times", n)
	}
	if got := td.status(t, "c1"); got != api.StatusRunning {
		t.Errorf("list shows %q", got)
	}

	// The adopted container is watched: its exit is noticed and cleaned up.
	td.frt.end("c1", runtime.Exit{Status: 3})
	waitFor(t, "the exit to be recorded", func() bool {
		rec, _ := td.storedInstance(t, "c1")
		return rec.State == state.StateStopped && inst.live() == nil
	})
	if rec, _ := td.storedInstance(t, "c1"); rec.LastExit == nil || rec.LastExit.Status != 3 {
		t.Errorf("last exit %+v, want status 3", rec.LastExit)
	}
}

// TestReconcileCleansUpDeadContainer: a container recorded running died
// while no daemon watched it: what its run held is released and the
// record says stopped, with the exit the shim recorded.
func TestReconcileCleansUpDeadContainer(t *testing.T) {
	exitTime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		runtime  func(td *testDaemon)
		wantExit *state.Exit
	}{
		{"runtime stopped", func(td *testDaemon) {
			td.frt.exited("c1", runtime.Exit{Status: 137, Signal: "SIGKILL", Time: exitTime})
		}, &state.Exit{Status: 137, Signal: "SIGKILL", Time: exitTime}},
		// Nothing left to read the exit from (a reboot cleared the run
		// directory): the exit is unknown, not a clean 0.
		{"runtime unknown", func(td *testDaemon) {}, &state.Exit{Status: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDaemon(t)
			rec := td.putInstance(t, "c1", state.StateRunning)
			td.fnet.attach("c1", rec.Address, true)
			td.fcg.set(td.cfg.cgroupPath("c1"), func(cg *fakeCgroup) { cg.created = true })
			tc.runtime(td)

			td.startDaemon(t)

			inst := td.insts.get("c1")
			if inst.live() != nil {
				t.Error("a dead container has a live handle")
			}
			if n := td.frt.count("Delete c1"); n != 1 {
				t.Errorf("runtime Delete called %d times, want 1", n)
			}
			if attached, _ := td.fnet.isAttached("c1"); attached {
				t.Error("network still attached")
			}
			if cg := td.cgroup("c1"); !cg.destroyed {
				t.Error("cgroup not destroyed")
			}
			got, _ := td.storedInstance(t, "c1")
			if got.State != state.StateStopped || inst.record().State != state.StateStopped {
				t.Errorf("state stored %q, in memory %q; want stopped", got.State, inst.record().State)
			}
			if tc.wantExit != nil && tc.wantExit.Status == -1 && got.LastExit != nil && !got.LastExit.Time.IsZero() {
				tc.wantExit.Time = got.LastExit.Time // "when it was found out"
			}
			if tc.wantExit != nil && (got.LastExit == nil || *got.LastExit != *tc.wantExit) {
				t.Errorf("last exit %+v, want %+v", got.LastExit, tc.wantExit)
			}
			if !td.storage.VolumeExists(containerVolume("c1")) {
				t.Error("volume gone")
			}
			if got := td.status(t, "c1"); got != api.StatusStopped {
				t.Errorf("list shows %q", got)
			}
		})
	}
}

// TestReconcileUndoesInterruptedCreate: a record still "creating" is a
// create the daemon did not finish: everything goes, the record last.
func TestReconcileUndoesInterruptedCreate(t *testing.T) {
	td := newTestDaemon(t)
	td.putInstance(t, "c1", state.StateCreating)
	td.putInstance(t, "c2", state.StateStopped)

	td.startDaemon(t)

	if _, ok := td.storedInstance(t, "c1"); ok {
		t.Error("record of the interrupted create is still stored")
	}
	if td.insts.get("c1") != nil {
		t.Error("the interrupted create is still registered")
	}
	if td.storage.VolumeExists(containerVolume("c1")) {
		t.Error("volume of the interrupted create is still there")
	}
	if td.frt.count("Delete c1") != 1 || td.fnet.count("Detach c1") != 1 || !td.cgroup("c1").destroyed {
		t.Error("runtime state, network or cgroup of the interrupted create not released")
	}
	if _, ok := td.storedInstance(t, "c2"); !ok || !td.storage.VolumeExists(containerVolume("c2")) {
		t.Error("another instance was touched")
	}
}

// TestReconcileFrozenContainer: a container found frozen is thawed (a
// snapshot's daemon died in its frozen window), unless the journal of a
// move that froze it says the move must settle first.
func TestReconcileFrozenContainer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		journal    *state.Migration
		wantFrozen bool
	}{
		{"no journal", nil, false},
		{"source journal", &state.Migration{Instance: "c1", Role: state.MigrationSource, Peer: testPeerFP,
			Name: "c1", Live: true, Start: true, Phase: state.PhaseRestoring}, true},
		{"target journal", &state.Migration{Instance: "c1", Role: state.MigrationTarget, Peer: "source-host",
			Name: "c1", Live: true, Start: true, Phase: state.PhaseRestoring}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDaemon(t)
			rec := td.putInstance(t, "c1", state.StateRunning)
			td.frt.run("c1")
			td.fnet.attach("c1", rec.Address, true)
			td.freeze("c1")
			if td.frt.status("c1") != runtime.StatusPaused {
				t.Fatal("the fake runtime does not report a frozen container paused")
			}
			if tc.journal != nil {
				td.putJournal(t, *tc.journal)
			}

			// Reconcile alone: the settle that follows at start is
			// tested with the journals (settle_test.go).
			if err := td.load(); err != nil {
				t.Fatal(err)
			}
			td.reconcile(context.Background())

			if td.insts.get("c1").live() == nil {
				t.Fatal("paused container not adopted")
			}
			cg := td.cgroup("c1")
			if cg.frozen != tc.wantFrozen {
				t.Errorf("frozen after reconcile: %v, want %v (events %v)", cg.frozen, tc.wantFrozen, td.fcg.eventLog())
			}
			if tc.wantFrozen && len(td.fcg.eventLog()) != 0 {
				t.Errorf("freezer touched: %v", td.fcg.eventLog())
			}
		})
	}
}

// TestReconcileFinishesRollback: a daemon killed during a snapshot restore
// (after the old disk went, before the new one was in place) left the
// record RollingBack: the disk is cloned from the snapshot again.
func TestReconcileFinishesRollback(t *testing.T) {
	for _, tc := range []struct {
		name      string
		oldVolume bool // the old disk is still there (killed before it was deleted)
	}{{"old disk deleted", false}, {"old disk still there", true}} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDaemon(t)
			td.putInstance(t, "c1", state.StateStopped, func(r *state.Instance) { r.RollingBack = "snap0" })
			td.putSnapshot(t, "c1", "snap0", "snapshot snap0")
			if !tc.oldVolume {
				if err := td.storage.DeleteVolume(context.Background(), containerVolume("c1")); err != nil {
					t.Fatal(err)
				}
			}

			td.startDaemon(t)

			if got := td.readVolume(t, containerVolume("c1")); got != "snapshot snap0" {
				t.Errorf("container disk holds %q, want the snapshot's", got)
			}
			if got := td.readVolume(t, snapshotVolume("c1", "snap0")); got != "snapshot snap0" {
				t.Errorf("snapshot holds %q", got)
			}
			rec, _ := td.storedInstance(t, "c1")
			if rec.RollingBack != "" || td.insts.get("c1").record().RollingBack != "" {
				t.Errorf("RollingBack still set: stored %q", rec.RollingBack)
			}
			if rec.State != state.StateStopped {
				t.Errorf("state %q", rec.State)
			}
		})
	}
}

// TestReconcileStoppedUnknown: a stopped instance the runtime knows
// nothing of (the usual case) costs one network detach (a start killed
// before its launch leaves a netns), and no runtime call that would exec
// runc for every stopped container at start.
func TestReconcileStoppedUnknown(t *testing.T) {
	td := newTestDaemon(t)
	rec := td.putInstance(t, "c1", state.StateStopped)
	td.fnet.attach("c1", rec.Address, true) // left by an interrupted start

	td.startDaemon(t)

	if n := td.fnet.count("Detach c1"); n != 1 {
		t.Errorf("network detached %d times, want 1", n)
	}
	if attached, _ := td.fnet.isAttached("c1"); attached {
		t.Error("network still attached")
	}
	// ... and a restore's root left bound for CRIU (no exec: an unmount).
	if n := td.frt.count("ReleaseRestoreRoot c1"); n != 1 {
		t.Errorf("restore's root released %d times, want 1", n)
	}
	for _, call := range []string{"Delete c1", "Kill c1", "Watch c1", "Start c1"} {
		if n := td.frt.count(call); n != 0 {
			t.Errorf("%s called %d times", call, n)
		}
	}
	if td.cgroup("c1").destroyed || len(td.cgroup("c1").sets) != 0 {
		t.Error("cgroup touched")
	}
	got, _ := td.storedInstance(t, "c1")
	if got.State != state.StateStopped || got.LastExit != nil {
		t.Errorf("record changed: %+v", got)
	}
}

// TestReconcileStateError: when the runtime cannot say whether a container
// runs, reconcile leaves it alone: cleaning it up as stopped would kill a
// running container (runc delete --force).
func TestReconcileStateError(t *testing.T) {
	td := newTestDaemon(t)
	rec := td.putInstance(t, "c1", state.StateRunning)
	td.frt.run("c1")
	td.fnet.attach("c1", rec.Address, true)
	td.frt.stateErr = errors.New("runc state: exit status 1")

	td.startDaemon(t)

	if n := td.frt.count("Delete c1"); n != 0 {
		t.Errorf("runtime Delete called %d times", n)
	}
	if attached, _ := td.fnet.isAttached("c1"); !attached {
		t.Error("network detached")
	}
	if got, _ := td.storedInstance(t, "c1"); got.State != state.StateRunning {
		t.Errorf("stored state %q, want running (untouched)", got.State)
	}
}

// TestReconcileOrphans: at start, a record whose volume is gone and
// volumes no record explains are deleted and reported (log and host
// info); what a migration journal names, and what records explain, stay.
func TestReconcileOrphans(t *testing.T) {
	td := newTestDaemon(t)
	td.putInstance(t, "kept", state.StateStopped)
	td.putSnapshot(t, "kept", "s1", "kept s1")
	td.putInstance(t, "novolume", state.StateStopped)
	td.putSnapshot(t, "novolume", "s1", "novolume s1")
	if err := td.storage.DeleteVolume(context.Background(), containerVolume("novolume")); err != nil {
		t.Fatal(err)
	}
	td.writeVolume(t, containerVolume("stray"), "stray")
	td.writeVolume(t, snapshotVolume("stray", "s1"), "stray s1")
	td.writeVolume(t, snapshotVolume("kept", "unrecorded"), "kept unrecorded")
	td.writeVolume(t, storage.Volume{Type: storage.VolumeCheckpoint, Name: "kept/unrecorded"}, "ckpt")
	td.writeVolume(t, storage.Volume{Type: storage.VolumeImage, Name: "feedface"}, "image")
	td.writeVolume(t, containerVolume("incoming"), "incoming")
	td.putJournal(t, state.Migration{Instance: "incoming", Name: "incoming", Role: state.MigrationTarget, Peer: "p1", Phase: state.PhaseTransfer})

	if err := td.load(); err != nil {
		t.Fatal(err)
	}
	td.reconcile(context.Background())

	for _, vol := range []storage.Volume{
		containerVolume("stray"), snapshotVolume("stray", "s1"), snapshotVolume("kept", "unrecorded"),
		{Type: storage.VolumeCheckpoint, Name: "kept/unrecorded"}, {Type: storage.VolumeImage, Name: "feedface"},
		snapshotVolume("novolume", "s1"),
	} {
		if td.storage.VolumeExists(vol) {
			t.Errorf("%s kept", vol)
		}
	}
	for _, vol := range []storage.Volume{containerVolume("kept"), snapshotVolume("kept", "s1"), containerVolume("incoming")} {
		if !td.storage.VolumeExists(vol) {
			t.Errorf("%s deleted", vol)
		}
	}
	if _, ok := td.storedInstance(t, "novolume"); ok || td.insts.get("novolume") != nil {
		t.Error("the record without a volume is kept")
	}
	if _, err := td.state.GetSnapshot("novolume", "s1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("its snapshot record: %v", err)
	}
	if _, ok := td.storedInstance(t, "kept"); !ok {
		t.Error("a good record went")
	}
	warnings := strings.Join(td.ServerInfo(context.Background()).Host.Warnings, "\n")
	for _, want := range []string{"instance novolume", "container/stray", "snapshot/stray/s1", "snapshot/kept/unrecorded", "checkpoint/kept/unrecorded", "image/feedface"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if strings.Contains(warnings, "incoming") || strings.Contains(warnings, "kept/s1") {
		t.Errorf("warnings name what was fine:\n%s", warnings)
	}
}
