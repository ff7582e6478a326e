package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// MigrateInstance validates a move (or copy) to a peer host and runs it as
// an operation whose metadata carries the progress and, at the end, the
// per-phase timing report ("timing").
func (d *Daemon) MigrateInstance(ctx context.Context, name string, req api.InstanceMigratePost) (*operations.Operation, error) {
	if _, err := d.getRecord(name); err != nil {
		return nil, err
	}
	if req.TargetFingerprint == d.fingerprint {
		return nil, errorf(ErrInvalid, "the target is this host")
	}
	peer, err := d.peerByFingerprint(req.TargetFingerprint)
	if err != nil {
		return nil, err
	}
	if req.Name == "" {
		req.Name = name
	}
	if err := ValidateName("instance", req.Name); err != nil {
		return nil, err
	}
	switch req.Memory {
	case "":
		req.Memory = migration.MemoryAuto
	case migration.MemoryAuto, migration.MemoryLazy, migration.MemoryCopy:
	default:
		return nil, errorf(ErrInvalid, "unknown memory mode %q (want auto, lazy or copy)", req.Memory)
	}
	if req.Live && req.Copy {
		return nil, errorf(ErrInvalid, "a copy is not live (drop --live)")
	}
	if req.Live && d.liveOf(name) == nil {
		return nil, errorf(ErrConflict, "instance %q is not running: a live move needs a running container", name)
	}
	if req.Live {
		if err := d.checkDumpable(name); err != nil {
			return nil, err
		}
	}
	_, sends := d.storage.(storage.Sender)
	_, syncs := d.storage.(storage.TreeSyncer)
	if !sends && !syncs {
		return nil, errorf(ErrConflict, "the %s storage driver cannot send volumes to another host", d.storage.Info().Name)
	}
	desc := "Moving instance"
	if req.Copy {
		desc = "Copying instance"
	}
	return d.ops.Start(d.ctx, desc, instanceResources(name), func(ctx context.Context, op *operations.Operation) error {
		return d.migrateOut(ctx, op, name, peer, req)
	}), nil
}

// outgoing is one migration seen from the source.
type outgoing struct {
	d      *Daemon
	op     *operations.Operation
	name   string
	req    api.InstanceMigratePost
	sess   *migration.Session
	timing migration.Timing
	// snaps are the pre-copy snapshots sent so far (deleted at the end).
	snaps []storage.Volume
	// base is the newest snapshot the target already has (the parent of
	// the first pre-copy pass), if any.
	base *storage.Volume
	// pageBytes counts memory pages streamed during a copy-mode dump.
	pageBytes atomic.Int64
	// passes and manifest track tree-sync passes (dir driver).
	passes   int
	manifest storage.Manifest
	// frozen is set while the source container is frozen by the migration.
	frozen bool
	// committed: the container runs on the target; the source copy is gone.
	committed bool
	// linkDown: the source container's host veth is down (network lock).
	linkDown bool
	// downSince is when a cold move stopped the container.
	downSince time.Time
	// journal records the move's progress for a daemon restarted in the
	// middle (see migrationJournal); unsettled means the outcome is unknown
	// and left to settleOutgoing.
	journal   migrationJournal
	unsettled bool
}

func (d *Daemon) migrateOut(ctx context.Context, op *operations.Operation, name string, peer state.Peer, req api.InstanceMigratePost) (err error) {
	unlock, err := d.lockInstance(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	defer d.setBusy(name, StatusMigrating)()
	inst, err := d.getRecord(name)
	if err != nil {
		return err
	}
	if req.Live && req.Memory == migration.MemoryAuto {
		req.Memory = d.autoMemoryMode(name)
	}
	m := &outgoing{d: d, op: op, name: name, req: req}
	m.timing.Mode = "cold"
	if req.Live {
		m.timing.Mode = "live/" + req.Memory
	}
	if req.Copy {
		m.timing.Mode = "copy"
	}
	start := time.Now()
	defer m.cleanup()

	wasRunning := d.liveOf(name) != nil
	m.journal = migrationJournal{Role: journalSource, Peer: req.TargetFingerprint, Name: req.Name, Live: req.Live,
		Copy: req.Copy, Start: wasRunning && !req.Copy, WasRunning: wasRunning && !req.Live && !req.Copy,
		Phase: journalTransfer, Started: start}
	if err := m.note(); err != nil {
		return err
	}
	if wasRunning && !req.Live && !req.Copy {
		// Cold move: stop first; a failure starts it again here. The
		// downtime runs from here until it runs on the target.
		op.SetMetadata(map[string]any{"phase": "stop"})
		m.downSince = time.Now()
		if err := d.stopLocked(ctx, name, false, d.cfg.StopTimeout); err != nil {
			return err
		}
		m.timing.SuspendDump = migration.Seconds(time.Since(m.downSince))
		defer func() {
			if err != nil && !m.committed {
				if serr := d.startLocked(context.WithoutCancel(ctx), name); serr != nil {
					err = fmt.Errorf("%w (and restarting it here failed: %v)", err, serr)
				}
			}
		}()
	}

	op.SetMetadata(map[string]any{"phase": "connect", "target": peer.Name})
	conn, err := d.peerClient(peer).Upgrade(ctx, "/1.0/migration", migration.UpgradeProtocol)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", peer.Name, err)
	}
	if m.sess, err = migration.Client(conn); err != nil {
		conn.Close()
		return err
	}
	defer m.sess.Close()
	var snaps []state.Snapshot
	if !req.InstanceOnly && !req.Copy {
		if snaps, err = d.state.ListSnapshots(name); err != nil {
			return err
		}
	}
	wire := toWire(inst)
	wire.Name = req.Name
	hello := migration.Hello{Version: migration.Version, Source: d.cfg.Name, Instance: wire, Live: req.Live,
		Memory: req.Memory, Start: wasRunning && !req.Copy, KeepAddress: !req.Copy, Storage: d.storage.Info().Name,
		Snapshots: len(snaps)}
	if err := m.sess.Send(hello); err != nil {
		return err
	}
	if _, err := m.sess.Expect(ctx, migration.MsgAccepted); err != nil {
		return fmt.Errorf("%s refused the migration: %w", peer.Name, err)
	}
	defer func() {
		if err != nil && !m.committed {
			m.sess.SendError(err)
		}
	}()

	if err = m.sendSnapshots(ctx, snaps); err != nil {
		return err
	}
	if req.Live {
		err = m.live(ctx)
	} else {
		err = m.cold(ctx, req.Copy && wasRunning)
	}
	if err != nil {
		return err
	}
	m.timing.Total = migration.Seconds(time.Since(start))
	op.SetMetadata(map[string]any{"phase": "done", "timing": m.timing})
	return nil
}

// cold sends the stopped container's disk (or, for a copy of a running
// container, a snapshot taken in a short freeze) and lets the target start
// it; a move then deletes the source.
func (m *outgoing) cold(ctx context.Context, freeze bool) error {
	t0 := time.Now()
	if freeze {
		if err := m.freeze(ctx); err != nil {
			return err
		}
	}
	if _, err := m.sendDisk(ctx, true); err != nil {
		return err
	}
	if freeze {
		m.thaw()
	}
	m.timing.CopyAfterSuspend = migration.Seconds(time.Since(t0))
	if err := m.startOnTarget(); err != nil {
		return err
	}
	resumed, err := m.sess.Expect(ctx, migration.MsgResumed)
	if err != nil {
		return err
	}
	m.timing.UndumpResume = resumed.RestoreSeconds
	if !m.downSince.IsZero() {
		m.timing.FrozenTotal = migration.Seconds(time.Since(m.downSince))
	}
	return m.commit(ctx)
}

// live moves a running container: disk pre-copy while it runs, then a
// short freeze for the checkpoint and the last disk increment, restore on
// the target, and (post-copy) memory pulled after the resume.
func (m *outgoing) live(ctx context.Context) error {
	d := m.d
	t0 := time.Now()
	if err := m.precopy(ctx); err != nil {
		return err
	}
	m.timing.Precopy = migration.Seconds(time.Since(t0))

	dir := d.migrationDir(m.name)
	_ = os.RemoveAll(dir)
	images, work := filepath.Join(dir, "images"), d.cfg.migrateWorkDir(m.name)
	_ = os.RemoveAll(work)
	defer d.dropMigrationDir(m.name)
	lazy := m.req.Memory == migration.MemoryLazy

	// Everything CRIU can do while the container runs is done first.
	m.op.SetMetadata(map[string]any{"phase": "checkpoint"})
	dump, err := m.prepareDump(ctx, images, work, lazy)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		if !started {
			dump.release()
		}
	}()

	// Frozen from here until the target resumes.
	freezeAt := time.Now()
	if err := m.freeze(ctx); err != nil {
		return err
	}
	// vessel's network lock: no packet reaches the frozen sockets while
	// CRIU dumps them (CRIU's own lock is off, see criuOptions).
	if err := d.net.SetHostLink(m.name, false); err != nil {
		return err
	}
	m.linkDown = true
	// The last disk increment is snapshotted at once and sent while CRIU
	// dumps the processes: both happen frozen, neither waits for the other.
	type diskResult struct {
		n   int64
		d   time.Duration
		err error
	}
	diskDone := make(chan diskResult, 1)
	go func() {
		t := time.Now()
		n, err := m.sendDisk(ctx, true)
		diskDone <- diskResult{n, time.Since(t), err}
	}()
	tck := time.Now()
	started = true
	err = dump.start()
	d.log.Debug("migration source: checkpoint", "name", m.name, "took", time.Since(tck), "since freeze", time.Since(freezeAt))
	disk := <-diskDone
	d.log.Debug("migration source: final disk", "name", m.name, "took", disk.d)
	if err != nil {
		return err
	}
	defer func() {
		if !m.committed {
			dump.abort()
		}
	}()
	if lazy {
		m.journal.PageServer = dump.pageServer
		if err := m.note(); err != nil {
			return err
		}
	}
	d.crashAt(faultSourceFrozen)
	m.timing.SuspendDump = migration.Seconds(time.Since(freezeAt))
	if disk.err != nil {
		return disk.err
	}
	m.timing.CopyAfterSuspend, m.timing.AfterSuspendBytes = migration.Seconds(disk.d), disk.n

	t2 := time.Now()
	n, err := m.sendImages(ctx, images, dump.pages)
	if err != nil {
		return err
	}
	m.timing.CopyDump, m.timing.DumpBytes = migration.Seconds(time.Since(t2)), n+m.pageBytes.Load()

	t3 := time.Now()
	m.op.SetMetadata(map[string]any{"phase": "restore"})
	if lazy {
		go m.servePages(ctx, dump.pageServer)
	}
	if err := m.startOnTarget(); err != nil {
		return err
	}
	if err := m.awaitResumed(ctx); err != nil {
		return err
	}
	m.timing.UndumpResume = migration.Seconds(time.Since(t3))
	m.timing.FrozenTotal = migration.Seconds(time.Since(freezeAt))
	m.op.SetMetadata(map[string]any{"phase": "resumed", "frozen_s": m.timing.FrozenTotal})

	if lazy {
		// Post-copy: the target runs; its page faults are served by the
		// dump's page server until every page has moved.
		t4 := time.Now()
		m.op.SetMetadata(map[string]any{"phase": "post-copy"})
		msg, err := m.sess.Expect(ctx, migration.MsgPagesDone)
		if werr := dump.wait(); err == nil && werr != nil {
			err = werr
		}
		m.timing.Postcopy, m.timing.PostcopyBytes = migration.Seconds(time.Since(t4)), msg.Bytes
		if err != nil {
			d.log.Error("POST-COPY FAILED after the container resumed on the target: it may miss memory pages",
				"name", m.name, "err", err)
			// The target owns the container now; finish the source side.
			_ = m.commit(context.WithoutCancel(ctx))
			return fmt.Errorf("post-copy memory transfer failed after the container resumed on the target (it may crash; use --memory=copy to avoid this trade-off): %w", err)
		}
	} else if err := dump.wait(); err != nil {
		d.log.Warn("checkpoint process", "name", m.name, "err", err)
	}
	return m.commit(ctx)
}

// awaitResumed waits for the target's verdict on the restore. If the
// connection breaks meanwhile, the outcome is unknown: ask the target
// (through a new connection) whether the container runs there.
func (m *outgoing) awaitResumed(ctx context.Context) error {
	_, err := m.sess.Expect(ctx, migration.MsgResumed)
	if err == nil {
		return nil
	}
	if errors.Is(err, migration.ErrRemote) || ctx.Err() != nil {
		return err // the target failed the restore and cleaned up
	}
	for i := 0; i < 10; i++ {
		runsThere, qerr := m.d.runsOnTarget(context.WithoutCancel(ctx), m.journal)
		switch {
		case qerr == nil && runsThere:
			m.d.log.Warn("lost the migration connection after the restore; the container runs on the target", "name", m.name)
			return nil
		case qerr == nil:
			return err // not there: resume here
		}
		time.Sleep(time.Second)
	}
	// Unknown: never run it in two places. It stays frozen here (and cut
	// off) until the target answers; settleOutgoing keeps asking.
	m.frozen, m.linkDown, m.unsettled = false, false, true
	return fmt.Errorf("connection to the target lost during the restore and the target does not answer: %s stays FROZEN on this host until the target answers, then runs in exactly one place: %w", m.name, err)
}

// sendSnapshots sends the instance's snapshots, oldest first, each disk as
// the difference from the one before (and a stateful one's checkpoint);
// the newest becomes the parent of the first pre-copy pass, so the
// container's disk then moves as a difference too.
func (m *outgoing) sendSnapshots(ctx context.Context, snaps []state.Snapshot) error {
	d := m.d
	sender, sends := d.storage.(storage.Sender)
	var prev *storage.Volume
	for i, s := range snaps {
		m.op.SetMetadata(map[string]any{"phase": "snapshots", "snapshot": s.Name, "iteration": i})
		rec := migration.SnapshotRecord{Name: s.Name, Created: s.Created, Stateful: s.Stateful, DiskBytes: s.DiskBytes,
			MemoryBytes: s.MemoryBytes, FrozenMs: s.FrozenMs, Config: s.Config, OS: migration.OS(s.OS)}
		msg := migration.Message{Type: migration.MsgSnapshot, Record: &rec}
		if prev != nil {
			msg.Parent = filepath.Base(prev.Name)
		}
		if err := m.sess.Send(msg); err != nil {
			return err
		}
		vol := snapshotVolume(m.name, s.Name)
		st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
		if err != nil {
			return err
		}
		if sends {
			err = sender.SendVolume(ctx, vol, prev, st)
		} else {
			_, err = d.storage.(storage.TreeSyncer).SyncVolume(ctx, vol, nil, st)
		}
		st.Close()
		if err != nil {
			return fmt.Errorf("send snapshot %s: %w", s.Name, err)
		}
		if s.Stateful {
			st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
			if err != nil {
				return err
			}
			_, err = migration.SendDir(st, d.storage.Path(checkpointVolume(m.name, s.Name)))
			st.Close()
			if err != nil {
				return fmt.Errorf("send checkpoint of snapshot %s: %w", s.Name, err)
			}
		}
		if _, err := m.sess.Expect(ctx, migration.MsgSnapshotOK); err != nil {
			return fmt.Errorf("target could not store snapshot %s: %w", s.Name, err)
		}
		if sends {
			prev = &vol
		}
	}
	m.base = prev
	return nil
}

// precopy sends the disk while the container runs: a full pass, then the
// changes since the previous pass, until a pass is small or the passes stop
// shrinking. The target makes each one durable before the next.
func (m *outgoing) precopy(ctx context.Context) error {
	var prev int64 = -1
	for i := 0; i < precopyMaxIterations; i++ {
		n, err := m.sendDisk(ctx, false)
		if err != nil {
			return err
		}
		m.timing.PrecopyIterations++
		m.timing.PrecopyBytes += n
		if n < precopyDoneBytes || (prev >= 0 && n > prev*3/4) {
			break
		}
		prev = n
	}
	return nil
}

// sendDisk sends the container's disk, or what changed since the previous
// pass, and waits until the target has it on disk.
func (m *outgoing) sendDisk(ctx context.Context, final bool) (int64, error) {
	if _, ok := m.d.storage.(storage.Sender); !ok {
		return m.syncTree(ctx, final)
	}
	return m.sendSnapshotDisk(ctx, final)
}

// syncTree is a pass of a driver without send streams (dir): the live
// tree's changed entries since the previous pass, rsync-style, straight
// into the target's container volume.
func (m *outgoing) syncTree(ctx context.Context, final bool) (int64, error) {
	i := m.passes
	m.passes++
	if err := m.sess.Send(migration.Message{Type: migration.MsgDisk, Iteration: i, Final: final}); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
	if err != nil {
		return 0, err
	}
	p := startProgress(m.op, map[string]any{"phase": map[bool]string{false: "precopy", true: "final disk"}[final], "iteration": i, "bytes": 0})
	man, serr := m.d.storage.(storage.TreeSyncer).SyncVolume(ctx, containerVolume(m.name), m.manifest, io.MultiWriter(st, p))
	st.Close()
	p.end()
	if serr != nil {
		return 0, fmt.Errorf("send disk: %w", serr)
	}
	m.manifest = man
	ack, err := m.sess.Expect(ctx, migration.MsgDiskSynced)
	if err != nil {
		return 0, fmt.Errorf("target could not store the disk: %w", err)
	}
	return ack.Bytes, nil
}

// sendSnapshotDisk snapshots the container volume, sends it (as the
// difference from the previous snapshot, if any) and waits until the
// target has it on disk.
func (m *outgoing) sendSnapshotDisk(ctx context.Context, final bool) (int64, error) {
	d := m.d
	i := len(m.snaps)
	snap := migrateSnapshot(m.name, i)
	_ = d.storage.DeleteVolume(ctx, snap) // leftover of a crashed migration
	if err := d.storage.CloneVolume(ctx, snap, containerVolume(m.name), true); err != nil {
		return 0, fmt.Errorf("snapshot for transfer: %w", err)
	}
	m.snaps = append(m.snaps, snap)
	// The parent of a pass is the previous pass or, for the first, the
	// newest snapshot the target already has.
	parent := m.base
	if i > 0 {
		parent = &m.snaps[i-1]
	}
	msg := migration.Message{Type: migration.MsgDisk, Iteration: i, Snapshot: filepath.Base(snap.Name), Final: final}
	if parent != nil {
		msg.Parent = filepath.Base(parent.Name)
	}
	if err := m.sess.Send(msg); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
	if err != nil {
		return 0, err
	}
	phase := "precopy"
	if final {
		phase = "final disk"
	}
	p := startProgress(m.op, map[string]any{"phase": phase, "iteration": i, "bytes": 0})
	serr := d.storage.(storage.Sender).SendVolume(ctx, snap, parent, io.MultiWriter(st, p))
	st.Close()
	sent := p.end()
	if serr != nil {
		select {
		case <-m.sess.Closed():
			return sent, fmt.Errorf("connection to the target lost while sending the disk (pass %d): %w", i, serr)
		default:
		}
		return sent, fmt.Errorf("send disk: %w", serr)
	}
	ack, err := m.sess.Expect(ctx, migration.MsgDiskSynced)
	if err != nil {
		return sent, fmt.Errorf("target could not store the disk: %w", err)
	}
	return ack.Bytes, nil
}

// sendImages streams the checkpoint images (all but the page files already
// streamed during the dump, which pages names) to the target.
func (m *outgoing) sendImages(ctx context.Context, dir string, pages []string) (int64, error) {
	if err := m.sess.Send(migration.Message{Type: migration.MsgImages, Pages: pages}); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
	if err != nil {
		return 0, err
	}
	n, err := migration.SendDir(st, dir)
	st.Close()
	if err != nil {
		return n, fmt.Errorf("send checkpoint images: %w", err)
	}
	if _, err := m.sess.Expect(ctx, migration.MsgImagesDone); err != nil {
		return n, err
	}
	return n, nil
}

func (m *outgoing) freeze(ctx context.Context) error {
	cg, err := m.d.instanceCgroup(m.name)
	if err != nil {
		return err
	}
	if err := cg.Freeze(ctx); err != nil {
		return err
	}
	m.frozen = true
	return nil
}

func (m *outgoing) thaw() {
	if !m.frozen {
		return
	}
	if cg, err := m.d.instanceCgroup(m.name); err == nil {
		if err := cg.Thaw(); err != nil {
			m.d.log.Error("thaw after failed migration", "name", m.name, "err", err)
		}
	}
	m.frozen = false
}

// dumpRun is a prepared, running or finished checkpoint.
type dumpRun struct {
	prepared      *runtime.PreparedCheckpoint
	capture       *imgstream.Capture // copy mode: the page files' FIFOs
	ready, readyW *os.File           // lazy mode: CRIU's status pipe
	done          chan error         // lazy mode: the dump's end (after post-copy)
	pageServer    string             // addr:port of the lazy page server
	pages         []string           // page files streamed during a copy-mode dump
	result        error
	finished      bool
}

func (r *dumpRun) wait() error {
	if !r.finished {
		r.result, r.finished = <-r.done, true
	}
	return r.result
}

// abort ends a lazy dump whose pages nobody will fetch: CRIU keeps the
// tasks seized while its page server waits for the target, so a failed
// migration connects to the page server and hangs up; CRIU then finishes
// and lets go of the (still frozen) tasks.
func (r *dumpRun) abort() {
	if r.finished || r.pageServer == "" {
		return
	}
	hangUp(r.pageServer)
	select {
	case r.result = <-r.done:
		r.finished = true
	case <-time.After(30 * time.Second):
	}
}

// hangUp connects to a lazy dump's page server and closes at once: the
// page server takes it as a lazy-pages client that has everything, and ends.
func hangUp(pageServer string) {
	if c, err := net.DialTimeout("tcp", pageServer, 5*time.Second); err == nil {
		c.Close()
	}
}

// prepareDump gets the dump ready while the container still runs: the
// CRIU service is started and its request built (runtime.PrepareCheckpoint),
// and in copy mode the page-file FIFOs wait for CRIU. Only CRIU's dump is
// left for the frozen window (dumpRun.start).
func (m *outgoing) prepareDump(ctx context.Context, images, work string, lazy bool) (*dumpRun, error) {
	run := &dumpRun{done: make(chan error, 1)}
	opts := runtime.CheckpointOptions{ImagePath: images, WorkPath: work, LeaveRunning: true, TCPEstablished: true}
	if err := os.MkdirAll(images, 0o700); err != nil {
		return nil, err
	}
	if lazy {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		run.pageServer = "127.0.0.1:" + strconv.Itoa(port)
		if run.ready, run.readyW, err = os.Pipe(); err != nil {
			return nil, err
		}
		opts.LazyPages, opts.PageServer, opts.StatusFile = true, run.pageServer, run.readyW
	} else {
		// Copy mode: the memory pages go to the target as CRIU writes them
		// (FIFOs in place of the page files), not to this host's disk first.
		capture, err := imgstream.StartCapture(ctx, images, m.pageFiles(), &pageSink{m: m})
		if err != nil {
			return nil, err
		}
		run.capture = capture
	}
	pc, err := m.d.rt.PrepareCheckpoint(m.name, opts)
	if err != nil {
		run.release()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	run.prepared = pc
	return run, nil
}

// start dumps the (already frozen) container, leaving it frozen: CRIU puts
// a cgroup it found frozen back to frozen, so a failed migration thaws it
// and nothing was lost. With lazy pages it returns when the images are
// written and the page server is ready; the page server keeps running until
// the target has every page.
//
// CRIU runs without ctx: killing it would leave the tasks seized. A cancel
// aborts the capture instead, and CRIU's next write fails.
func (r *dumpRun) start() error {
	pc := r.prepared
	if r.ready != nil {
		go func() {
			r.done <- pc.Run()
			pc.Close()
			r.readyW.Close()
		}()
		// CRIU writes one byte when the page server is ready; EOF first
		// means the checkpoint failed.
		buf := make([]byte, 1)
		_, err := r.ready.Read(buf)
		r.ready.Close()
		if err != nil {
			r.finished, r.result = true, <-r.done
			if r.result != nil {
				return fmt.Errorf("checkpoint: %w", r.result)
			}
			return fmt.Errorf("checkpoint: CRIU never reported ready: %w", err)
		}
		return nil
	}
	err := pc.Run()
	pc.Close()
	pages, cerr := r.capture.Finish()
	r.finished = true
	switch {
	case err != nil:
		return fmt.Errorf("checkpoint: %w", err)
	case cerr != nil:
		return fmt.Errorf("stream memory pages to the target: %w", cerr)
	}
	r.pages = pages
	return nil
}

// release undoes prepareDump for a dump that never starts.
func (r *dumpRun) release() {
	if r.prepared != nil {
		r.prepared.Close()
	}
	for _, f := range []*os.File{r.ready, r.readyW} {
		if f != nil {
			f.Close()
		}
	}
	if r.capture != nil {
		_, _ = r.capture.Finish()
	}
}

// pageFiles is how many page-file FIFOs a dump needs: one per process,
// plus spares for shared memory segments.
func (m *outgoing) pageFiles() int {
	n := captureSpare
	if cg, err := m.d.instanceCgroup(m.name); err == nil {
		if pids, err := cg.Pids(); err == nil {
			n += len(pids)
		}
	}
	return n
}

// pageSink streams each page file of a dump to the target on its own
// stream; the target acknowledges them all with the other images.
type pageSink struct{ m *outgoing }

// Store implements imgstream.Sink.
func (p *pageSink) Store(ctx context.Context, name string, r io.Reader) error {
	st, err := p.m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPage, Name: name})
	if err != nil {
		return err
	}
	n, err := io.Copy(st, r)
	p.m.pageBytes.Add(n)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// servePages tunnels the target's lazy-pages connections, which arrive as
// streams on the session, to the local page server.
func (m *outgoing) servePages(ctx context.Context, addr string) {
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		if h.Kind != migration.StreamPageServer {
			st.Close()
			continue
		}
		go func() {
			defer st.Close()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				m.d.log.Error("page server unreachable", "addr", addr, "err", err)
				return
			}
			defer c.Close()
			pipe(st, c)
		}()
	}
}

// commit ends the move on the source: the container runs on the target
// now, so the source copy (frozen, or stopped) goes.
func (m *outgoing) commit(ctx context.Context) error {
	m.committed = true
	m.frozen = false
	if !m.req.Copy {
		if err := m.sendLogs(); err != nil {
			m.d.log.Warn("console log not carried to the target", "name", m.name, "err", err)
		}
		m.d.dropMovedSource(ctx, m.name)
	}
	m.d.removeJournal(m.name)
	_ = m.sess.Send(migration.Message{Type: migration.MsgCommit})
	return nil
}

// sendLogs sends the console log written here (the rotated file, then the
// current one): the target keeps it before what the container writes there.
func (m *outgoing) sendLogs() error {
	if err := m.sess.Send(migration.Message{Type: migration.MsgLogs}); err != nil {
		return err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamLogs})
	if err != nil {
		return err
	}
	defer st.Close()
	path := m.d.cfg.logPath(m.name)
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		_, err = io.Copy(st, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// dropMovedSource deletes the source copy of a container that now runs on
// its target (killing the frozen original first).
func (d *Daemon) dropMovedSource(ctx context.Context, name string) {
	// Before the instance's CRIU logs go with it.
	d.dropMigrationDir(name)
	if run := d.liveOf(name); run != nil {
		if err := d.rt.Kill(ctx, name); err != nil {
			d.log.Warn("kill migrated container", "name", name, "err", err)
		}
		select {
		case <-run.exited:
		case <-time.After(killGrace):
		}
		if err := d.cleanupStopped(ctx, name, run, false); err != nil {
			d.log.Warn("cleanup migrated container", "name", name, "err", err)
		}
	}
	if err := d.deleteLocked(ctx, name, false); err != nil {
		d.log.Error("delete the source copy of a moved container", "name", name, "err", err)
	}
}

// cleanup runs at the end whatever happened: thaw a container still frozen
// by a failed migration and drop the pre-copy snapshots.
func (m *outgoing) cleanup() {
	if m.unsettled {
		j := m.journal
		j.PageServer = "" // aborted already
		if err := m.d.writeJournal(m.name, j, false); err != nil {
			m.d.log.Error("migration journal", "name", m.name, "err", err)
		}
		go func() {
			unlock, err := m.d.lockInstance(m.d.ctx, m.name)
			if err != nil {
				return
			}
			defer unlock()
			defer m.d.setBusy(m.name, StatusMigrating)()
			m.d.settleOutgoing(m.d.ctx, m.name, j)
		}()
	} else if !m.committed {
		m.d.removeJournal(m.name)
	}
	if m.linkDown && !m.committed {
		if err := m.d.net.SetHostLink(m.name, true); err != nil {
			m.d.log.Error("network unlock after failed migration", "name", m.name, "err", err)
		}
	}
	m.thaw()
	for _, s := range m.snaps {
		_ = m.d.storage.DeleteVolume(context.Background(), s)
	}
}

// note writes the move's journal (see migrationJournal).
func (m *outgoing) note() error { return m.d.writeJournal(m.name, m.journal, false) }

// startOnTarget tells the target to start the container: from here on,
// whether it runs there can only be known by asking.
func (m *outgoing) startOnTarget() error {
	m.journal.Phase = journalRestoring
	if err := m.note(); err != nil {
		return err
	}
	if err := m.sess.Send(migration.Message{Type: migration.MsgStart}); err != nil {
		return err
	}
	m.d.crashAt(faultSourceStarted)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pipe copies both ways until both directions have ended, passing each
// end of input on as a half-close: CRIU's page server finishes only when it
// sees the lazy-pages daemon hang up.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // TCP
		} else {
			_ = dst.Close() // a yamux stream's Close is a half-close (FIN)
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// autoCopyMaxBytes is the memory below which --memory=auto copies it while
// frozen. Measured on a 2-core VM (bench/migrate): post-copy adds ~20 ms to
// an idle container's freeze (the lazy-pages daemon, its connection to the
// source, the first faults), and copying adds ~3 ms per MiB (512 MiB: 1.5
// s); they break even near 7 MiB, and below that copying is the shorter
// freeze, with nothing depending on the source once the target runs. The
// threshold stays a little under the break-even point.
const autoCopyMaxBytes = 6 << 20

// autoMemoryMode picks the memory mode of a live move with --memory=auto
// from the container's anonymous memory; copy where this kernel has no
// userfaultfd (post-copy needs it).
func (d *Daemon) autoMemoryMode(name string) string {
	if !haveUserfaultfd() {
		d.log.Info("memory mode auto: no userfaultfd on this kernel", "name", name, "mode", migration.MemoryCopy)
		return migration.MemoryCopy
	}
	mode, anon := migration.MemoryLazy, "unknown"
	if cg, err := d.instanceCgroup(name); err == nil {
		if st, err := cg.Stats(); err == nil {
			anon = fmt.Sprintf("%d KiB", st.MemoryAnon>>10)
			if st.MemoryAnon <= autoCopyMaxBytes {
				mode = migration.MemoryCopy
			}
		}
	}
	d.log.Info("memory mode auto", "name", name, "anon_memory", anon, "mode", mode)
	return mode
}

// haveUserfaultfd says whether the kernel offers userfaultfd(2).
func haveUserfaultfd() bool {
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno != 0 {
		return errno != unix.ENOSYS
	}
	unix.Close(int(fd))
	return true
}
