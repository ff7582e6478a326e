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
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
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
		req.Memory = migration.MemoryLazy
	case migration.MemoryLazy, migration.MemoryCopy:
	default:
		return nil, errorf(ErrInvalid, "unknown memory mode %q (want lazy or copy)", req.Memory)
	}
	if req.Live && req.Copy {
		return nil, errorf(ErrInvalid, "a copy is not live (drop --live)")
	}
	if req.Live && d.liveOf(name) == nil {
		return nil, errorf(ErrConflict, "instance %q is not running: a live move needs a running container", name)
	}
	if _, ok := d.storage.(storage.Sender); !ok {
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
	// frozen is set while the source container is frozen by the migration.
	frozen bool
	// committed: the container runs on the target; the source copy is gone.
	committed bool
	// linkDown: the source container's host veth is down (network lock).
	linkDown bool
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
	if wasRunning && !req.Live && !req.Copy {
		// Cold move: stop first; a failure starts it again here.
		op.SetMetadata(map[string]any{"phase": "stop"})
		if err := d.stopLocked(ctx, name, false, d.cfg.StopTimeout); err != nil {
			return err
		}
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
	wire := toWire(inst)
	wire.Name = req.Name
	hello := migration.Hello{Version: migration.Version, Source: d.cfg.Name, Instance: wire, Live: req.Live,
		Memory: req.Memory, Start: wasRunning && !req.Copy, KeepAddress: !req.Copy, Storage: d.storage.Info().Name}
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
	if err := m.sess.Send(migration.Message{Type: migration.MsgStart}); err != nil {
		return err
	}
	if _, err := m.sess.Expect(ctx, migration.MsgResumed); err != nil {
		return err
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
	images, work := filepath.Join(dir, "images"), filepath.Join(dir, "work")
	defer d.dropMigrationDir(m.name)
	lazy := m.req.Memory == migration.MemoryLazy

	// Frozen from here until the target resumes.
	m.op.SetMetadata(map[string]any{"phase": "checkpoint"})
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
	dump, err := m.checkpoint(ctx, images, work, lazy)
	disk := <-diskDone
	if err != nil {
		return err
	}
	defer func() {
		if !m.committed {
			dump.abort()
		}
	}()
	m.timing.SuspendDump = migration.Seconds(time.Since(freezeAt))
	if disk.err != nil {
		return disk.err
	}
	m.timing.CopyAfterSuspend, m.timing.AfterSuspendBytes = migration.Seconds(disk.d), disk.n

	t2 := time.Now()
	n, err := m.sendImages(ctx, images)
	if err != nil {
		return err
	}
	m.timing.CopyDump, m.timing.DumpBytes = migration.Seconds(time.Since(t2)), n

	t3 := time.Now()
	m.op.SetMetadata(map[string]any{"phase": "restore"})
	if lazy {
		go m.servePages(ctx, dump.pageServer)
	}
	if err := m.sess.Send(migration.Message{Type: migration.MsgStart}); err != nil {
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
	peer, perr := m.d.peerByFingerprint(m.req.TargetFingerprint)
	if perr != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		inst, qerr := m.d.peerClient(peer).Instance(qctx, m.req.Name)
		cancel()
		switch {
		case qerr == nil && inst.Status == api.StatusRunning:
			m.d.log.Warn("lost the migration connection after the restore; the container runs on the target", "name", m.name)
			return nil
		case qerr == nil || client.StatusCode(qerr) == 404:
			return err // not running there: resume here
		}
		time.Sleep(time.Second)
	}
	// Unknown: never run it in two places. It stays frozen here.
	m.frozen = false // do not thaw in cleanup
	return fmt.Errorf("connection to the target lost during the restore and the target does not answer: %s is left FROZEN on this host to avoid running it twice; check the target, then delete or thaw it: %w", m.name, err)
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

// sendDisk snapshots the container volume, sends it (as the difference from
// the previous snapshot, if any) and waits until the target has it on disk.
func (m *outgoing) sendDisk(ctx context.Context, final bool) (int64, error) {
	d := m.d
	i := len(m.snaps)
	snap := migrateSnapshot(m.name, i)
	_ = d.storage.DeleteVolume(ctx, snap) // leftover of a crashed migration
	if err := d.storage.CloneVolume(ctx, snap, containerVolume(m.name), true); err != nil {
		return 0, fmt.Errorf("snapshot for transfer: %w", err)
	}
	m.snaps = append(m.snaps, snap)
	var parent *storage.Volume
	msg := migration.Message{Type: migration.MsgDisk, Iteration: i, Snapshot: filepath.Base(snap.Name), Final: final}
	if i > 0 {
		p := m.snaps[i-1]
		parent = &p
		msg.Parent = filepath.Base(p.Name)
	}
	if err := m.sess.Send(msg); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream()
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
		return sent, fmt.Errorf("send disk: %w", serr)
	}
	ack, err := m.sess.Expect(ctx, migration.MsgDiskSynced)
	if err != nil {
		return sent, fmt.Errorf("target could not store the disk: %w", err)
	}
	return ack.Bytes, nil
}

// sendImages streams the checkpoint images to the target.
func (m *outgoing) sendImages(ctx context.Context, dir string) (int64, error) {
	if err := m.sess.Send(migration.Message{Type: migration.MsgImages}); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream()
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

// dumpRun is a running (or finished) checkpoint.
type dumpRun struct {
	done       chan error
	pageServer string // addr:port of the lazy page server
	result     error
	finished   bool
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
	if c, err := net.DialTimeout("tcp", r.pageServer, 5*time.Second); err == nil {
		c.Close()
	}
	select {
	case r.result = <-r.done:
		r.finished = true
	case <-time.After(30 * time.Second):
	}
}

// checkpoint dumps the (already frozen) container with CRIU, leaving it
// frozen: CRIU puts a cgroup it found frozen back to frozen, so a failed
// migration thaws it and nothing was lost. With lazy pages the dump returns
// when the images are written and the page server is ready; the page server
// keeps running until the target has every page.
func (m *outgoing) checkpoint(ctx context.Context, images, work string, lazy bool) (*dumpRun, error) {
	run := &dumpRun{done: make(chan error, 1)}
	opts := runtime.CheckpointOptions{ImagePath: images, WorkPath: work, LeaveRunning: true, TCPEstablished: true}
	var ready *os.File
	if lazy {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		run.pageServer = "127.0.0.1:" + strconv.Itoa(port)
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		ready = r
		opts.LazyPages, opts.PageServer, opts.StatusFile = true, run.pageServer, w
		go func() { run.done <- m.d.rt.Checkpoint(context.WithoutCancel(ctx), m.name, opts); w.Close() }()
		// CRIU writes one byte when the page server is ready; EOF first
		// means the checkpoint failed.
		buf := make([]byte, 1)
		if _, err := ready.Read(buf); err != nil {
			if derr := <-run.done; derr != nil {
				return nil, fmt.Errorf("checkpoint: %w", derr)
			}
			return nil, fmt.Errorf("checkpoint: CRIU never reported ready: %w", err)
		}
		return run, nil
	}
	err := m.d.rt.Checkpoint(ctx, m.name, opts)
	run.done <- nil
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return run, nil
}

// servePages tunnels the target's lazy-pages connections, which arrive as
// streams on the session, to the local page server.
func (m *outgoing) servePages(ctx context.Context, addr string) {
	for {
		st, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
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
	d := m.d
	m.committed = true
	m.frozen = false
	if !m.req.Copy {
		if run := d.liveOf(m.name); run != nil {
			if err := d.rt.Kill(ctx, m.name); err != nil {
				d.log.Warn("kill migrated container", "name", m.name, "err", err)
			}
			select {
			case <-run.exited:
			case <-time.After(killGrace):
			}
			if err := d.cleanupStopped(ctx, m.name, run, false); err != nil {
				d.log.Warn("cleanup migrated container", "name", m.name, "err", err)
			}
		}
		if err := d.deleteLocked(ctx, m.name, false); err != nil {
			d.log.Error("delete the source copy of a moved container", "name", m.name, "err", err)
		}
	}
	_ = m.sess.Send(migration.Message{Type: migration.MsgCommit})
	return nil
}

// cleanup runs at the end whatever happened: thaw a container still frozen
// by a failed migration and drop the pre-copy snapshots.
func (m *outgoing) cleanup() {
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
