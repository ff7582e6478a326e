package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// AcceptMigration serves an incoming migration from a trusted peer in the
// background, as an operation of this host. The session counts against
// the peer's limit from the start; its Hello must come within 30 s, be
// valid (checkHello) and the session must have its container running
// here within Config.MigrationTimeout; removing the peer's certificate
// ends it.
func (d *Daemon) AcceptMigration(peer string, conn net.Conn) {
	fp := connFingerprint(conn)
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		sess, err := migration.Server(ctx, conn)
		if err != nil {
			cancel()
			conn.Close()
			d.log.Warn("incoming migration", "peer", peer, "err", err)
			return
		}
		in := &incoming{sess: sess}
		refuse := func(err error) {
			cancel()
			sess.SendError(err)
			d.log.Warn("incoming migration refused", "peer", peer, "err", err)
			sess.Linger(migrationLinger)
		}
		if err := d.incoming.add(fp, in, d.cfg.MigrationSessions); err != nil {
			refuse(err)
			return
		}
		var hello migration.Hello
		err = sess.Recv(ctx, &hello)
		if err == nil {
			err = checkHello(hello)
		}
		if err != nil {
			d.incoming.remove(fp, in)
			refuse(fmt.Errorf("incoming migration: %w", err))
			return
		}
		cancel()
		name := hello.Instance.Name
		d.ops.Start(d.ctx, "Receiving instance from "+peer, instanceResources(name), func(ctx context.Context, op *operations.Operation) error {
			defer d.incoming.remove(fp, in)
			ctx, stop := context.WithCancelCause(ctx)
			defer stop(nil)
			in.bind(stop)
			err := d.migrateIn(ctx, op, peer, sess, hello)
			if err != nil {
				// migrateIn told the peer why: let it read that first.
				go sess.Linger(migrationLinger)
			} else {
				sess.Close()
			}
			if c := context.Cause(ctx); err != nil && c != nil && !errors.Is(err, c) {
				err = fmt.Errorf("%w: %w", c, err)
			}
			if err != nil {
				d.log.Warn("incoming migration failed", "peer", peer, "name", name, "err", err)
			}
			return err
		})
	}()
}

// migrationTarget is one migration seen from the target host.
type migrationTarget struct {
	d     *Daemon
	op    *operations.Operation
	sess  *migration.Session
	hello migration.Hello
	peer  string // the source host
	inst  *instance
	name  string
	// disk receives the container's volume in passes; closed at the end
	// (btrfs deletes the received passes then, out of the frozen window).
	disk   storage.VolumeReceiver
	images string
	work   string
	// lazy is the post-copy page daemon; pageBytes counts pages moved.
	lazy      *runtime.LazyPages
	pageBytes atomic.Int64
	// prep is the live restore's preparation (network, bundle), made
	// before the source freezes.
	prep *prepared
	rst  runtime.Restorer // the live restore, prepared with prep
	// early: the volume and lazy-pages daemon made once the images are
	// in, before "start" (migrate_target_early.go); pre: that daemon,
	// started as the move was accepted, until early takes it over.
	early *earlyStart
	pre   *preLazy
	// rootReady: prepareRoot mounted the volume for the restore.
	rootReady bool
	// resumedAt: when CRIU answered the live restore (its tasks run from
	// then); set by the restore's Resumed hook, read once it returned.
	resumedAt time.Time
	// imagesNamed: nameImages has run (a live move that renames).
	imagesNamed bool
	// committed: the volume is made from the last pass (commitDisk, or
	// commitErr); started: start has taken it over.
	committed, started bool
	commitErr          error
	// imagesIn: the images are complete; a page file after them is a
	// protocol error (they are checked before "start").
	imagesIn atomic.Bool

	// Data streams, routed by dispatch: disk and images streams wait here
	// for the control message that announces them; page files are stored
	// as they arrive (pageSink) and recorded in pagesDone.
	diskCh, imagesCh, logsCh chan net.Conn
	pageSink                 *imgstream.DirSink
	pagesMu                  sync.Mutex
	pagesDone                map[string]error
	pagesChanged             chan struct{}
	// budget bounds the images and page files stored (they land in
	// RunDir, a tmpfs); streams counts the data streams opened.
	budget    *imageBudget
	streams   int
	pageSlots chan struct{}
	abortMu   sync.Mutex
	abortErr  error
	// memPasses counts the pre-copy memory passes received (in
	// pre-N beside the images), memPassBytes their bytes.
	memPasses    int
	memPassBytes int64
}

// migrateIn receives an instance: it reserves the name and address (the
// record and the journal in one transaction), takes the disk passes and
// snapshots, and on "start" restores (live) or starts (cold) the
// container; the journal goes in the transaction that records it running.
// Any failure before that removes everything received.
func (d *Daemon) migrateIn(ctx context.Context, op *operations.Operation, peer string, sess *migration.Session, hello migration.Hello) (err error) {
	defer func() {
		if err != nil {
			sess.SendError(err)
		}
	}()
	if err := checkHello(hello); err != nil {
		return err
	}
	if hello.Instance.Type == state.TypeVM && hello.Live {
		return d.migrateInVM(ctx, op, peer, sess, hello) // migrate_vm_target.go
	}
	name := hello.Instance.Name
	// Until the container runs here the session holds a name and an
	// address: it has MigrationTimeout for that, then it is rolled back
	// (closing the session ends whatever waits on the peer).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.AfterFunc(d.cfg.MigrationTimeout, func() {
		err := fmt.Errorf("%w (%s after its hello)", errSessionDeadline, d.cfg.MigrationTimeout)
		sess.SendError(err) // first: cancelling closes the session
		cancel(err)
		sess.Close()
	})
	defer deadline.Stop()
	defer func() {
		if c := context.Cause(ctx); err != nil && errors.Is(c, errSessionDeadline) && !errors.Is(err, errSessionDeadline) {
			err = fmt.Errorf("%w: %w", c, err)
		}
	}()
	if f := d.storage.Info().TransferFormat; hello.TransferFormat != f {
		return errorf(ErrConflict, "cannot receive volumes sent as %q on %s: its storage receives %q", hello.TransferFormat, d.cfg.Name, f)
	}
	rec := fromWire(hello.Instance)
	rec.State = state.StateStopped
	// A VM's copy (a move keeps its address): its first boot empties the
	// guest's machine ID (a container's copy has it emptied in start). A
	// VM moving before the boot that would have emptied it keeps the mark.
	rec.NewIdentity = rec.IsVM() && (rec.NewIdentity || !hello.KeepAddress)
	if err := d.admitPeerInstance(&rec, hello.Live); err != nil {
		return err
	}
	journal := state.Migration{Instance: name, Role: state.MigrationTarget, Peer: peer, Name: name, Live: hello.Live,
		Start: hello.Start, Phase: state.PhaseTransfer, Started: time.Now()}
	// The id map check and the registration hold idmapMu together: two
	// moves in cannot both take one range.
	d.idmapMu.Lock()
	err = d.checkPeerIDMap(name, rec.IDMap)
	var inst *instance
	var unlock func()
	if err == nil {
		inst, unlock, err = d.register(rec, StatusMigrating, hello.KeepAddress, func(tx *state.Tx) error { return tx.PutMigration(journal) })
	}
	d.idmapMu.Unlock()
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return fmt.Errorf("on %s: %w", d.cfg.Name, err)
		}
		return err
	}
	// Once the container runs here it is an ordinary instance: release
	// it at once, not after the migration's cleanup.
	release := sync.OnceFunc(unlock)
	defer release()
	d.crashAt(faultTargetReserved)
	r := revert.New()
	defer r.Fail()
	// The record and the journal go together, last.
	r.Add(func() { d.undo("forget", name, d.forget(inst)) })
	m := &migrationTarget{d: d, op: op, sess: sess, hello: hello, inst: inst, name: name, peer: peer,
		diskCh: make(chan net.Conn, 4), imagesCh: make(chan net.Conn, 4), logsCh: make(chan net.Conn, 1),
		pagesDone: map[string]error{}, pagesChanged: make(chan struct{}),
		budget: &imageBudget{limit: d.imageLimit(hello.Instance.Config)}, pageSlots: make(chan struct{}, migrationPageStreams)}
	if hello.Memory == api.MemoryPrecopy && m.budget.limit > 0 {
		// The passes hold a page once per pass that found it written.
		m.budget.limit *= 2
	}
	defer func() {
		if a := m.aborted(); err != nil && a != nil && !errors.Is(err, a) {
			err = fmt.Errorf("%w: %w", a, err)
		}
	}()
	if err := m.prepareDirs(); err != nil {
		return err
	}
	defer d.dropMigrationDir(name, filepath.Dir(m.images))
	defer m.closeDisk()
	defer m.dropUnstartedVolume()
	defer m.endEarly() // first: waits for the early work
	go m.dispatch(ctx)
	if hello.Live {
		if m.prep, err = d.prepareRun(ctx, inst, true); err != nil {
			return err
		}
		m.prep.limitsLater = true
		r.Add(m.prep.abort)
		if err := m.prepareRestore(ctx); err != nil {
			return err
		}
		m.startPreLazy(ctx)
	}
	if err := sess.Send(migration.Message{Type: migration.MsgAccepted, Address: inst.record().Address}); err != nil {
		return err
	}
	if err := m.receive(ctx, r); err != nil {
		return err
	}
	deadline.Stop()
	// From here the container lives on this host. The received passes go
	// first, out of the frozen window (the source has heard "resumed")
	// but still under the lock: a move back at once makes passes of the
	// same names.
	m.closeDisk()
	var loaded chan struct{}
	if m.lazy != nil && m.hello.Memory == api.MemoryPrecopy {
		// Pre-copy's memory is copied in from this host's images; until
		// it all is, the container is not checkpointed again (pages
		// not yet in would be missed: newCheckpoint waits), and the
		// images stay.
		loaded = make(chan struct{})
		d.memLoads.Store(name, loaded)
		go func() {
			m.loadMemory()
			// A move back waits for this before it reuses the work
			// directory, CRIU's logs of this restore with it.
			d.keepMigrationLogs(name)
			d.memLoads.CompareAndDelete(name, loaded)
			close(loaded)
		}()
	}
	release()
	err = m.finish(ctx)
	if loaded != nil {
		<-loaded
	}
	return err
}

// prepareDirs makes the directories the checkpoint images and CRIU's work
// files land in. The images are restored as soon as they are in, and a
// crash makes them worthless (the source resumes): no syncs, and the
// restore reads them from the page cache.
func (m *migrationTarget) prepareDirs() error {
	dir, err := m.d.newMigrationDir(m.name)
	if err != nil {
		return err
	}
	m.images, m.work = filepath.Join(dir, "images"), m.d.cfg.migrateWorkDir(m.name)
	_ = os.RemoveAll(m.work)
	for _, p := range []string{m.images, m.work} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
	}
	m.pageSink = &imgstream.DirSink{Dir: m.images, Volatile: true}
	return nil
}

// receive serves the source's control messages until it says "start" and
// the container runs here.
func (m *migrationTarget) receive(ctx context.Context, r *revert.Reverter) error {
	for {
		var msg migration.Message
		if err := m.sess.Recv(ctx, &msg); err != nil {
			return err
		}
		if m.early != nil && msg.Type != migration.MsgStart && msg.Type != migration.MsgError {
			// The images are checked and the volume made: nothing may
			// change them now.
			return fmt.Errorf("%w: %q after the images", migration.ErrProtocol, msg.Type)
		}
		switch msg.Type {
		case migration.MsgDisk:
			if err := m.injectFault(faultRecvDisk); err != nil {
				return err
			}
			if err := m.receiveDisk(ctx, msg); err != nil {
				return err
			}
		case migration.MsgMemoryPass:
			if err := m.receiveMemoryPass(ctx, msg); err != nil {
				return err
			}
		case migration.MsgMemoryMode:
			if err := m.switchMemoryMode(ctx, msg); err != nil {
				return err
			}
		case migration.MsgImages:
			if err := m.receiveImages(ctx, msg.Pages); err != nil {
				return err
			}
			m.beginStart(ctx)
		case migration.MsgSnapshot:
			if err := m.receiveSnapshot(ctx, msg, r); err != nil {
				return err
			}
		case migration.MsgStart:
			if err := m.injectFault(faultBeforeRestore); err != nil {
				return err
			}
			return m.start(ctx, r)
		case migration.MsgError:
			return fmt.Errorf("%w: %s", migration.ErrRemote, msg.Error)
		default:
			return fmt.Errorf("%w: unexpected %q", migration.ErrProtocol, msg.Type)
		}
	}
}

// start makes the container's volume from the last received disk and
// runs it: a CRIU restore after a live move, a start after a cold one. The
// journal goes in the transaction that records the outcome, before the
// source hears it: a crash from then on never deletes what the source
// deletes too.
func (m *migrationTarget) start(ctx context.Context, r *revert.Reverter) error {
	d := m.d
	if m.disk == nil {
		return fmt.Errorf("%w: start before any disk", migration.ErrProtocol)
	}
	t0 := time.Now()
	early := m.takeEarly()
	d.log.Debug("migration target: start, early work taken", "name", m.name, "took", time.Since(t0))
	if early != nil && early.lp != nil {
		m.lazy = early.lp // killed by restore's failure
	}
	m.started = true
	if err := m.commitDisk(ctx); err != nil {
		if m.lazy != nil {
			m.lazy.Kill()
		}
		return fmt.Errorf("create root filesystem: %w", err)
	}
	vol := containerVolume(m.name)
	r.Add(func() { d.undo("delete volume", m.name, d.storage.DeleteVolume(context.Background(), vol)) })
	r.Add(m.releaseRoot) // first: the mounts hold the volume
	d.log.Debug("migration target: root filesystem ready", "name", m.name, "took", time.Since(t0))
	switch {
	case m.inst.record().IsVM(): // its name is on its kernel command line
	case !m.hello.KeepAddress:
		// A copy (a move keeps its address): its own name and machine
		// identity, as a local copy's.
		if err := writeIdentity(d.storage.Path(vol), m.name); err != nil {
			return err
		}
	case m.renamed():
		// A move that renames: the same machine (its machine ID kept).
		if err := writeName(d.storage.Path(vol), m.name); err != nil {
			return err
		}
	}
	if early != nil && early.lpErr != nil {
		return early.lpErr
	}
	if err := early.checkErrOrNil(); err != nil {
		if m.lazy != nil {
			m.lazy.Kill()
		}
		return err
	}
	if err := early.rootErrOrNil(); err != nil {
		// Not fatal: what failed is undone (prepareRoot), and the
		// restore makes its root ready itself, in the frozen window as
		// before the early work; a cause that stays fails it there.
		d.log.Warn("migration target: the restore's root was not made ready early; the restore tries again", "name", m.name, "err", err)
	}
	dropJournal := func(tx *state.Tx) error { return tx.DeleteMigration(m.name) }
	switch {
	case m.hello.Live:
		if err := m.nameImages(); err != nil { // done early, mostly
			if m.lazy != nil {
				m.lazy.Kill()
			}
			return err
		}
		if err := m.restore(ctx, dropJournal); err != nil {
			return err
		}
	case m.hello.Start && m.inst.record().IsVM():
		if err := m.startVM(ctx, dropJournal); err != nil { // migrate_vm_cold.go
			return err
		}
	case m.hello.Start:
		p, err := d.prepareRun(ctx, m.inst, false)
		if err != nil {
			return err
		}
		if err := d.launchPrepared(ctx, p, func(bundle, logPath string) (runtime.Process, error) {
			return d.rt.Start(ctx, m.name, bundle, runtime.StartOptions{LogPath: logPath})
		}, dropJournal); err != nil {
			return err
		}
	default:
		if err := d.state.DeleteMigration(m.name); err != nil {
			return err
		}
	}
	r.Success()
	d.log.Debug("migration target: resumed sent", "name", m.name, "after", time.Since(t0))
	resumed := migration.Message{Type: migration.MsgResumed, RestoreSeconds: migration.Seconds(time.Since(t0))}
	if !m.resumedAt.IsZero() {
		// The source's frozen time ends as the tasks resumed, not once
		// this message reaches it.
		resumed.ResumedSeconds = migration.Seconds(time.Since(m.resumedAt))
	}
	err := m.sess.Send(resumed)
	if m.hello.Live {
		// The container runs here, whether or not "resumed" got out:
		// the start's CPU boost ends now, out of the source's frozen
		// window (launchPrepared left it: prepared.limitsLater).
		t := time.Now()
		if lerr := d.applyLimits(context.WithoutCancel(ctx), m.name, m.prep.config, 0); lerr != nil {
			d.log.Warn("migration target: the container's own limits after the restore", "name", m.name, "err", lerr)
		}
		d.log.Debug("migration target: limits after the restore", "name", m.name, "took", time.Since(t))
	}
	return err
}

// restore brings the checkpointed processes back. With lazy memory a
// lazy-pages daemon fetches pages from the source's page server through the
// session (a socket pair tunnelled to the source).
func (m *migrationTarget) restore(ctx context.Context, also func(*state.Tx) error) error {
	d := m.d
	lp := m.lazy // started once the images were in (beginStart)
	if err := m.injectFault(faultRestore); err != nil {
		if lp != nil {
			lp.Kill()
		}
		return err
	}
	if lp == nil && m.lazyRestore() {
		var err error
		if lp, err = m.lazyPagesReady(ctx); err != nil {
			return err
		}
		m.lazy = lp
	}
	t0 := time.Now()
	defer func() { d.log.Debug("migration target: restore", "name", m.name, "took", time.Since(t0)) }()
	// The source is frozen until we answer: a stuck restore is stopped.
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RestoreTimeout)
	defer cancel()
	err := d.launchPrepared(ctx, m.prep, func(bundle, logPath string) (runtime.Process, error) {
		defer func() {
			d.log.Debug("migration target: CRIU restore returned", "name", m.name, "after", time.Since(t0))
		}()
		return m.rst.Run(rctx)
	}, also)
	if err != nil && lp != nil {
		lp.Kill()
	}
	if err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		d.killCgroupTasks(m.name)
		err = fmt.Errorf("the restore did not finish within %s and was stopped: %w", d.cfg.RestoreTimeout, err)
	}
	return err
}

// prepareRestore starts the restore's CRIU before the source freezes
// (prepareDirectRestore): the frozen window then holds only CRIU's own
// restore.
func (m *migrationTarget) prepareRestore(ctx context.Context) error {
	d := m.d
	rst, err := d.prepareDirectRestore(ctx, m.prep, runtime.RestoreOptions{
		ImagePath: m.images, WorkPath: m.work, LazyPages: m.lazyRestore(), TCPEstablished: true,
		Hang:  d.fault(faultRestore) == "hang",
		IDMap: runIDMap(m.inst.record()), Untrusted: true,
		// The client's downtime ends as the tasks resume, not after
		// runc's state and the shim's hand-over; a failure of its own
		// is left to launchPrepared, which tries again.
		Resumed: func() {
			m.resumedAt = time.Now()
			if err := d.hostLinkUp(m.prep); err != nil {
				d.log.Warn("migration target: link up as the tasks resumed", "name", m.name, "err", err)
			}
		},
	})
	if err != nil {
		return err
	}
	m.rst = rst
	return nil
}

// lazyRestore says whether the restore leaves memory to a lazy-pages
// daemon: post-copy's, which pulls it from the source, and pre-copy's,
// which copies it in from the images on this host after the resume (a
// restore that read it all first would be frozen for as long).
func (m *migrationTarget) lazyRestore() bool {
	return m.hello.Memory == api.MemoryLazy || m.hello.Memory == api.MemoryPrecopy
}

// loadMemory waits until pre-copy's lazy-pages daemon has copied every
// page in from the images on this host (it needs nothing of the source).
func (m *migrationTarget) loadMemory() {
	t0 := time.Now()
	m.op.SetMetadata(map[string]any{"phase": "memory load"})
	<-m.lazy.Done()
	if err := m.lazy.Err(); err != nil {
		m.d.log.Error("MEMORY LOAD FAILED: the restored container may miss memory pages", "name", m.name, "err", err)
		return
	}
	m.d.log.Debug("migration target: memory loaded", "name", m.name, "took", time.Since(t0))
}

// finish waits for the post-copy to end (lazy) and for the source to
// commit; the container stays here whatever happens now.
func (m *migrationTarget) finish(ctx context.Context) error {
	d := m.d
	if m.lazy != nil && m.hello.Memory == api.MemoryLazy {
		m.op.SetMetadata(map[string]any{"phase": "post-copy"})
		<-m.lazy.Done()
		if err := m.lazy.Err(); err != nil {
			d.log.Error("POST-COPY FAILED: the restored container may miss memory pages", "name", m.name, "err", err)
			m.sess.SendError(err)
			return fmt.Errorf("post-copy failed after resume: %w", err)
		}
		if err := m.sess.Send(migration.Message{Type: migration.MsgPagesDone, Bytes: m.pageBytes.Load()}); err != nil {
			d.log.Warn("migration: pages-done not delivered", "name", m.name, "err", err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var msg migration.Message
		err := m.sess.Recv(cctx, &msg)
		if err == nil && msg.Type == migration.MsgLogs {
			if err := m.receiveLogs(cctx); err != nil {
				d.log.Warn("migration: console log from the source not kept", "name", m.name, "err", err)
			}
			continue
		}
		if err == nil {
			err = migration.Expect(msg, migration.MsgCommit)
		}
		if err != nil {
			d.log.Warn("migration: no commit from the source (the container runs here)", "name", m.name, "err", err)
		}
		break
	}
	m.op.SetMetadata(map[string]any{"phase": "done"})
	return nil
}

// injectFault acts out a fault injected at point (tests): "cut" drops the
// connection like a vanished peer, "fail" reports an error.
func (m *migrationTarget) injectFault(point string) error {
	switch m.d.fault(point) {
	case "crash":
		m.d.crashAt(point)
	case "cut":
		m.sess.Close()
		return injected(point)
	case "fail":
		return injected(point)
	}
	return nil
}

// closeDisk ends the disk's reception: the received passes go (and the
// volume too unless it was committed).
func (m *migrationTarget) closeDisk() {
	if m.disk != nil {
		m.d.undo("close disk receiver", m.name, m.disk.Close(context.Background()))
		m.disk = nil
	}
}
