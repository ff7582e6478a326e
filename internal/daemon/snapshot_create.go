package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// CreateSnapshot validates a snapshot request and runs it as an operation.
// Allowed on a running instance (frozen for the copy) or a stopped one;
// Stateful needs a running one.
func (d *Daemon) CreateSnapshot(ctx context.Context, name string, req api.SnapshotsPost) (*operations.Operation, error) {
	act := actSnapshot
	vmInst := false
	if inst, err := d.instance(name); err == nil {
		vmInst = isVM(inst)
	}
	if req.Stateful {
		act = actStatefulSnapshot
	}
	if _, err := d.checkNow(name, act, false); err != nil {
		return nil, err
	}
	if req.Name == "" {
		n, err := d.nextSnapshotName(name)
		if err != nil {
			return nil, err
		}
		req.Name = n
	}
	if err := ValidateName("snapshot", req.Name); err != nil {
		return nil, err
	}
	if _, err := d.state.GetSnapshot(name, req.Name); err == nil {
		return nil, errorf(ErrConflict, "snapshot %q of instance %q already exists", req.Name, name)
	}
	if req.Stateful && !vmInst {
		if err := d.checkDumpable(name); err != nil {
			return nil, err
		}
	}
	return d.ops.Start(d.ctx, "Creating snapshot", snapshotResources(name, req.Name), func(ctx context.Context, op *operations.Operation) error {
		inst, release, err := d.lock(ctx, name, act, false)
		if err != nil {
			return err
		}
		defer release()
		return d.snapshotLocked(ctx, op, inst, req)
	}), nil
}

// snapshotLocked takes the snapshot; the caller holds the instance's lock.
// On any failure or cancellation nothing of the snapshot is left, and a
// running container is thawed and keeps running.
func (d *Daemon) snapshotLocked(ctx context.Context, op *operations.Operation, inst *instance, req api.SnapshotsPost) error {
	if isVM(inst) {
		return d.snapshotVMLocked(ctx, op, inst, req)
	}
	name := inst.name
	rec := inst.record()
	if _, err := d.state.GetSnapshot(name, req.Name); err == nil {
		return errorf(ErrConflict, "snapshot %q of instance %q already exists", req.Name, name)
	}
	running := inst.live() != nil
	r := revert.New()
	defer r.Fail()
	bg := context.WithoutCancel(ctx)

	snapVol := snapshotVolume(name, req.Name)
	// Volumes without a record are the remains of a daemon that died
	// mid-snapshot: nobody lists them, they only block the name.
	for _, vol := range []storage.Volume{snapVol, checkpointVolume(name, req.Name)} {
		if err := d.storage.DeleteVolume(ctx, vol); err != nil {
			return err
		}
	}
	var ck *snapshotCheckpoint
	if req.Stateful {
		var err error
		if ck, err = d.prepareSnapshotCheckpoint(ctx, name, req.Name); err != nil {
			return err
		}
		r.Add(func() { ck.abort(bg) })
	}

	t0 := time.Now()
	var frozen time.Duration
	var err error
	if running {
		op.SetMetadata(map[string]any{api.MetaStage: "freeze"})
		frozen, err = d.whileFrozen(ctx, name, func() error {
			if err := d.storage.CloneVolume(ctx, snapVol, containerVolume(name), true); err != nil {
				return fmt.Errorf("snapshot the disk: %w", err)
			}
			r.Add(func() { d.undo("delete snapshot volume", name, d.storage.DeleteVolume(bg, snapVol)) })
			if ck != nil {
				return ck.dump(op)
			}
			return nil
		})
	} else {
		op.SetMetadata(map[string]any{api.MetaStage: "copy"})
		err = d.storage.CloneVolume(ctx, snapVol, containerVolume(name), true)
		if err == nil {
			r.Add(func() { d.undo("delete snapshot volume", name, d.storage.DeleteVolume(bg, snapVol)) })
		}
	}
	if err != nil {
		return err
	}
	if ck != nil {
		// A background dump writes the memory of the frozen instant now.
		op.SetMetadata(map[string]any{api.MetaStage: "memory"})
		if err := ck.wait(op); err != nil {
			return err
		}
	}
	snapRec := state.Snapshot{
		Instance: name,
		Name:     req.Name,
		Created:  t0.UTC(),
		Stateful: req.Stateful,
		FrozenMs: ms(frozen),
		Config:   rec.Config,
		OS:       rec.OS,
		TakenAs:  name,
	}
	if ck != nil {
		op.SetMetadata(map[string]any{api.MetaStage: "sync"})
		if snapRec.MemoryBytes, err = ck.finish(); err != nil {
			return err
		}
		// For benchmarks: where the time went.
		op.SetMetadata(map[string]any{
			"dump_ms":    ms(ck.dumpTime),
			"write_ms":   ms(ck.writeTime),
			"sync_ms":    ms(ck.syncTime),
			"page_bytes": ck.pageBytes,
			"io":         d.cfg.SnapshotIO,
			"memory":     ck.memory(),
		})
	}
	if snapRec.DiskBytes, err = d.storage.VolumeUsage(ctx, snapVol); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.state.CreateSnapshot(snapRec); err != nil {
		return err
	}
	r.Success()
	op.SetMetadata(map[string]any{api.MetaStage: "done", api.MetaSnapshot: req.Name, api.MetaFrozenMs: snapRec.FrozenMs})
	return nil
}

// whileFrozen runs fn with the instance's cgroup frozen and returns how
// long it was frozen. The cgroup is thawed whatever happens.
func (d *Daemon) whileFrozen(ctx context.Context, name string, fn func() error) (time.Duration, error) {
	f := &freezer{d: d, name: name}
	if err := f.freeze(ctx); err != nil {
		return 0, err
	}
	ferr := fn()
	frozen, terr := f.thaw()
	return frozen, errors.Join(ferr, terr)
}

// snapshotCheckpoint is the memory half of a stateful snapshot: a
// checkpoint session whose page files go into the checkpoint volume
// through vessel's O_DIRECT writer (or CRIU's own writes, with
// SnapshotIOCRIU).
type snapshotCheckpoint struct {
	d    *Daemon
	name string
	snap string
	dir  string
	ck   *runtime.Checkpoint

	// dumpTime is the frozen part of the dump (all of it, pages stored,
	// unless the memory is written in the background); writeTime the
	// background write after the thaw until the pages are durable;
	// syncTime the sync of the rest afterwards; pageBytes the page files'
	// size.
	dumpTime, writeTime, syncTime time.Duration
	pageBytes                     uint64
	background                    bool // the memory was written after the thaw
}

// prepareSnapshotCheckpoint creates the checkpoint volume and prepares the
// session (before the freeze: none of this needs to be frozen). CRIU's
// dump.log goes outside the checkpoint, so it is still there to read when
// a failed checkpoint has been removed. On btrfs the volume is made
// NODATASUM (storage.PrepareNoDataSumDir, as a VM's state): the restore reads the
// pages with O_DIRECT into memory it populates on the way, and on this
// project's 2-core hosts btrfs's verification of every block's checksum
// competed with that for the CPU (a restore-like read of 1 GiB alone:
// 1830 against 1337 MB/s, median of 5; a whole restore in bench/snapshot
// gained 3.5 %, within its noise); and the writes stay direct (btrfs
// serves O_DIRECT to checksummed files buffered since 6.14): 25 % faster.
func (d *Daemon) prepareSnapshotCheckpoint(ctx context.Context, name, snap string) (*snapshotCheckpoint, error) {
	vol := checkpointVolume(name, snap)
	if err := d.storage.CreateVolume(ctx, vol); err != nil {
		return nil, fmt.Errorf("create checkpoint volume: %w", err)
	}
	sc := &snapshotCheckpoint{d: d, name: name, snap: snap, dir: d.storage.Path(vol)}
	work := d.cfg.dumpWorkDir(name)
	_, err := storage.PrepareNoDataSumDir(sc.dir)
	if err == nil {
		err = os.RemoveAll(work)
	}
	if err == nil {
		o := runtime.CheckpointOptions{ImagePath: sc.dir, WorkPath: work,
			Background: d.cfg.SnapshotMemory == SnapshotMemoryBackground}
		if d.cfg.SnapshotIO != SnapshotIOCRIU {
			// CRIU's own O_DIRECT writes after the thaw where it has
			// them (patch 0041), else vessel's writer.
			o.Pages = &imgstream.DirSink{Dir: sc.dir}
			o.DirectPages = true
		}
		sc.ck, err = d.newCheckpoint(ctx, name, o)
	}
	if err != nil {
		d.undo("remove checkpoint volume", name, d.storage.DeleteVolume(context.WithoutCancel(ctx), vol))
		return nil, err
	}
	return sc, nil
}

// dump runs the frozen part of the checkpoint on the (frozen) container
// and reports the bytes written as progress. CRIU seizes the frozen tasks,
// dumps them, and puts the freezer back to FROZEN; the caller thaws. With
// a background dump it returns once CRIU has write-protected the memory
// and let go of the tasks: the rest is wait's. A cancelled operation
// aborts the page capture: CRIU's next write fails, it lets go of the
// tasks, and Run's error wraps context.Canceled.
func (sc *snapshotCheckpoint) dump(op *operations.Operation) error {
	t0 := time.Now()
	p := startProgress(op, map[string]any{api.MetaStage: "dump"}, sc.ck.Written)
	err := sc.ck.Run()
	p.end()
	sc.dumpTime = time.Since(t0)
	if err != nil {
		return fmt.Errorf("stateful snapshot of %s: %w", sc.name, err)
	}
	return nil
}

// wait waits for the memory a background dump writes after the thaw (at
// once for a dump that wrote it all while frozen), reporting progress. A
// cancelled operation aborts it as in dump; the container keeps running.
func (sc *snapshotCheckpoint) wait(op *operations.Operation) error {
	t0 := time.Now()
	p := startProgress(op, map[string]any{api.MetaStage: "memory"}, sc.ck.Written)
	err := sc.ck.Wait()
	p.end()
	sc.writeTime = time.Since(t0)
	sc.background = sc.ck.Background()
	if err != nil {
		return fmt.Errorf("stateful snapshot of %s: %w", sc.name, err)
	}
	return nil
}

// memory names when the snapshot's memory was written (for benchmarks).
func (sc *snapshotCheckpoint) memory() string {
	if sc.background {
		return SnapshotMemoryBackground
	}
	return SnapshotMemoryFrozen
}

// finish makes the checkpoint durable: the captured page files were synced
// by the sink; CRIU's other files (small) are synced here. It returns the
// checkpoint's size in bytes.
func (sc *snapshotCheckpoint) finish() (uint64, error) {
	t0 := time.Now()
	total, pages, err := imgstream.SyncImages(sc.dir, sc.ck.Pages())
	sc.syncTime, sc.pageBytes = time.Since(t0), pages
	if err != nil {
		return 0, fmt.Errorf("sync checkpoint %s/%s: %w", sc.name, sc.snap, err)
	}
	return total, nil
}

// abort ends the session and removes everything of a failed checkpoint.
func (sc *snapshotCheckpoint) abort(ctx context.Context) {
	sc.ck.Abort()
	if err := sc.d.storage.DeleteVolume(ctx, checkpointVolume(sc.name, sc.snap)); err != nil {
		sc.d.log.Error("remove failed checkpoint", "name", sc.name, "snapshot", sc.snap, "err", err)
	}
}

// ms is a duration in milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
