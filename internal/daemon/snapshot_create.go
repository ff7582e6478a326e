package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// captureSpare is how many page-file FIFOs are prepared beyond one per
// process (shared memory segments get page files of their own). Page files
// beyond them are written by CRIU itself: correct, only not through
// vessel's writer.
const captureSpare = 32

// CreateSnapshot validates a snapshot request and runs it as an operation.
// Allowed on a running instance (frozen for the copy) or a stopped one;
// Stateful needs a running one.
func (d *Daemon) CreateSnapshot(ctx context.Context, name string, req api.SnapshotsPost) (*operations.Operation, error) {
	act := actSnapshot
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
	if req.Stateful {
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
	name := inst.name
	rec := inst.record()
	var err error
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
	var ck *checkpointRun
	if req.Stateful {
		if ck, err = d.prepareCheckpoint(ctx, name, req.Name); err != nil {
			return err
		}
		r.Add(func() { ck.abort(bg) })
	}

	t0 := time.Now()
	var frozen time.Duration
	if running {
		op.SetMetadata(map[string]any{api.MetaStage: "freeze"})
		frozen, err = d.frozen(ctx, name, func() error {
			if err := d.storage.CloneVolume(ctx, snapVol, containerVolume(name), true); err != nil {
				return fmt.Errorf("snapshot the disk: %w", err)
			}
			r.Add(func() { _ = d.storage.DeleteVolume(bg, snapVol) })
			if ck != nil {
				return ck.dump(ctx, op)
			}
			return nil
		})
	} else {
		op.SetMetadata(map[string]any{api.MetaStage: "copy"})
		err = d.storage.CloneVolume(ctx, snapVol, containerVolume(name), true)
		if err == nil {
			r.Add(func() { _ = d.storage.DeleteVolume(bg, snapVol) })
		}
	}
	if err != nil {
		return err
	}
	snapRec := state.Snapshot{
		Instance: name,
		Name:     req.Name,
		Created:  t0.UTC(),
		Stateful: req.Stateful,
		FrozenMs: ms(frozen),
		Config:   rec.Config,
		OS:       rec.OS,
	}
	if ck != nil {
		op.SetMetadata(map[string]any{api.MetaStage: "sync"})
		if snapRec.MemoryBytes, err = ck.finish(); err != nil {
			return err
		}
		// For benchmarks: where the time went.
		op.SetMetadata(map[string]any{
			"dump_ms":    ms(ck.dumpTime),
			"sync_ms":    ms(ck.syncTime),
			"page_bytes": ck.pageBytes,
			"io":         ck.d.cfg.SnapshotIO,
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

// frozen runs fn with the instance's cgroup frozen and returns how long it
// was frozen. The cgroup is thawed whatever happens.
func (d *Daemon) frozen(ctx context.Context, name string, fn func() error) (time.Duration, error) {
	cg, err := d.instanceCgroup(name)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cg.Freeze(ctx); err != nil {
		return 0, err
	}
	ferr := fn()
	terr := cg.Thaw()
	frozen := time.Since(t0)
	if terr != nil {
		d.log.Error("thaw after snapshot", "name", name, "err", terr)
	}
	return frozen, errors.Join(ferr, terr)
}

// checkpointRun is one CRIU dump into a checkpoint volume, its page files
// captured into vessel's writer.
type checkpointRun struct {
	d       *Daemon
	name    string
	snap    string
	dir     string
	sink    *imgstream.DirSink
	capture *imgstream.Capture // nil with SnapshotIOCRIU
	stored  []string           // page files the capture wrote (and synced)

	// dumpTime is runc checkpoint until the captured pages are durable;
	// syncTime is the sync of the rest afterwards; pageBytes is the size
	// of the page files.
	dumpTime, syncTime time.Duration
	pageBytes          uint64
}

// prepareCheckpoint creates the checkpoint volume and starts capturing its
// page files (before the freeze: none of this needs to be frozen).
func (d *Daemon) prepareCheckpoint(ctx context.Context, name, snap string) (*checkpointRun, error) {
	vol := checkpointVolume(name, snap)
	if err := d.storage.CreateVolume(ctx, vol); err != nil {
		return nil, fmt.Errorf("create checkpoint volume: %w", err)
	}
	ck := &checkpointRun{d: d, name: name, snap: snap, dir: d.storage.Path(vol)}
	ck.sink = &imgstream.DirSink{Dir: ck.dir}
	if d.cfg.SnapshotIO == SnapshotIOCRIU {
		return ck, nil // CRIU writes every file itself; finish syncs them
	}
	n := captureSpare
	if cg, err := d.instanceCgroup(name); err == nil {
		if pids, err := cg.Pids(); err == nil {
			n += len(pids)
		}
	}
	capture, err := imgstream.StartCapture(ctx, ck.dir, n, ck.sink)
	if err != nil {
		_ = d.storage.DeleteVolume(context.WithoutCancel(ctx), vol)
		return nil, err
	}
	ck.capture = capture
	return ck, nil
}

// dump runs runc checkpoint --leave-running on the (frozen) container and
// reports the bytes written as progress. CRIU seizes the frozen tasks,
// thaws the cgroup to dump them (they stay stopped under ptrace), and puts
// the freezer back to FROZEN when it detaches; the caller thaws.
//
// runc runs without ctx: killing runc would orphan its CRIU. A
// cancellation aborts the capture instead, so CRIU's next page write
// fails, CRIU gives the tasks back and runc returns.
func (ck *checkpointRun) dump(ctx context.Context, op *operations.Operation) error {
	t0 := time.Now()
	p := startProgress(op, map[string]any{api.MetaStage: "dump"}, ck.sink.Written)
	// CRIU's dump.log goes outside the checkpoint, so that it is still
	// there to read when a failed checkpoint has been removed.
	work := ck.d.cfg.dumpWorkDir(ck.name)
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	err := ck.d.rt.Checkpoint(context.WithoutCancel(ctx), ck.name, runtime.CheckpointOptions{
		ImagePath:    ck.dir,
		WorkPath:     work,
		LeaveRunning: true,
	})
	p.end()
	var cerr error
	if ck.capture != nil {
		ck.stored, cerr = ck.capture.Finish()
	}
	ck.dumpTime = time.Since(t0)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case cerr != nil && !errors.Is(cerr, context.Canceled):
		// The writer failed first (disk full): that is the cause, CRIU's
		// broken pipe only its consequence.
		return fmt.Errorf("write the memory image: %w", cerr)
	case err != nil:
		return fmt.Errorf("stateful snapshot of %s: %w", ck.name, err)
	}
	return nil
}

// finish makes the checkpoint durable: the captured page files were synced
// by the sink; CRIU's other files (small) are synced here. It returns the
// checkpoint's size in bytes.
func (ck *checkpointRun) finish() (uint64, error) {
	t0 := time.Now()
	defer func() { ck.syncTime = time.Since(t0) }()
	var total uint64
	err := filepath.WalkDir(ck.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		total += uint64(fi.Size())
		if imgstream.IsPages(e.Name()) {
			ck.pageBytes += uint64(fi.Size())
		}
		if slices.Contains(ck.stored, e.Name()) {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	if err == nil {
		err = syncPath(ck.dir)
	}
	if err != nil {
		return 0, fmt.Errorf("sync checkpoint %s/%s: %w", ck.name, ck.snap, err)
	}
	return total, nil
}

// abort removes everything of a failed checkpoint.
func (ck *checkpointRun) abort(ctx context.Context) {
	if ck.capture != nil {
		ck.capture.Abort()
	}
	if err := ck.d.storage.DeleteVolume(ctx, checkpointVolume(ck.name, ck.snap)); err != nil {
		ck.d.log.Error("remove failed checkpoint", "name", ck.name, "snapshot", ck.snap, "err", err)
	}
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ms is a duration in milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
