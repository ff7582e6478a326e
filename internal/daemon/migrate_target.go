package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// AcceptMigration serves an incoming migration from a trusted peer in the
// background, as an operation of this host.
func (d *Daemon) AcceptMigration(peer string, conn net.Conn) {
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		sess, err := migration.Server(ctx, conn)
		if err != nil {
			cancel()
			conn.Close()
			d.log.Warn("incoming migration", "peer", peer, "err", err)
			return
		}
		var hello migration.Hello
		err = sess.Recv(ctx, &hello)
		cancel()
		if err != nil {
			sess.Close()
			d.log.Warn("incoming migration: no hello", "peer", peer, "err", err)
			return
		}
		name := hello.Instance.Name
		d.ops.Start(d.ctx, "Receiving instance from "+peer, instanceResources(name), func(ctx context.Context, op *operations.Operation) error {
			defer sess.Close()
			err := d.migrateIn(ctx, op, peer, sess, hello)
			if err != nil {
				d.log.Warn("incoming migration failed", "peer", peer, "name", name, "err", err)
			}
			return err
		})
	}()
}

// incoming is one migration seen from the target.
type incoming struct {
	d        *Daemon
	op       *operations.Operation
	sess     *migration.Session
	hello    migration.Hello
	name     string
	received []storage.Volume
	images   string
	work     string
	// lazy is the post-copy page daemon; pageBytes counts pages moved.
	lazy      *runtime.LazyPages
	pageBytes atomic.Int64
	// prep is the live restore's preparation (network, bundle), made
	// before the source freezes.
	prep *prepared
	// treeVolume: tree-sync passes (dir driver) fill the container volume
	// directly.
	treeVolume bool

	// Data streams, routed by dispatch: disk and images streams wait here
	// for the control message that announces them; page files are stored
	// as they arrive (pageSink) and recorded in pagesDone.
	diskCh, imagesCh, logsCh chan net.Conn
	pageSink                 *imgstream.DirSink
	pagesMu                  sync.Mutex
	pagesDone                map[string]error
	pagesChanged             chan struct{}
}

func (d *Daemon) migrateIn(ctx context.Context, op *operations.Operation, peer string, sess *migration.Session, hello migration.Hello) (err error) {
	defer func() {
		if err != nil {
			sess.SendError(err)
		}
	}()
	if hello.Version != migration.Version {
		return errorf(ErrInvalid, "migration protocol version %d, this host speaks %d", hello.Version, migration.Version)
	}
	name := hello.Instance.Name
	if err := ValidateName("instance", name); err != nil {
		return err
	}
	if hello.Storage != d.storage.Info().Name {
		return errorf(ErrConflict, "cannot receive a %s volume on the %s storage driver", hello.Storage, d.storage.Info().Name)
	}
	recv, _ := d.storage.(storage.Receiver)
	syncer, _ := d.storage.(storage.TreeSyncer)
	if recv == nil && syncer == nil {
		return errorf(ErrConflict, "the %s storage driver cannot receive volumes", d.storage.Info().Name)
	}
	unlock, err := d.lockInstance(ctx, name)
	if err != nil {
		return err
	}
	// Once the container runs here it is an ordinary instance: release
	// it at once, not after the migration's cleanup.
	release := sync.OnceFunc(func() {
		d.clearBusy(name)
		unlock()
	})
	defer release()
	d.setBusy(name, StatusMigrating)

	// The journal goes last, after the revert has removed what came.
	journaled := false
	defer func() {
		if journaled {
			d.removeJournal(name)
		}
	}()
	r := revert.New()
	defer r.Fail()
	inst := fromWire(hello.Instance)
	if err := d.reserve(&inst, hello.KeepAddress); err != nil {
		return err
	}
	r.Add(func() { _ = d.state.DeleteInstance(name) })
	if err := d.writeJournal(name, migrationJournal{Role: journalTarget, Peer: peer, Name: name, Live: hello.Live,
		Start: hello.Start, Phase: journalTransfer, Started: time.Now()}, true); err != nil {
		return err
	}
	journaled = true
	m := &incoming{d: d, op: op, sess: sess, hello: hello, name: name,
		diskCh: make(chan net.Conn, 4), imagesCh: make(chan net.Conn, 4), logsCh: make(chan net.Conn, 1),
		pagesDone: map[string]error{}, pagesChanged: make(chan struct{})}
	dir := d.migrationDir(name)
	_ = os.RemoveAll(dir)
	m.images, m.work = filepath.Join(dir, "images"), d.cfg.migrateWorkDir(name)
	_ = os.RemoveAll(m.work)
	for _, p := range []string{m.images, m.work} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
	}
	// The images are restored as soon as they are in, and a crash makes
	// them worthless (the source resumes): no syncs, and the restore reads
	// them from the page cache.
	m.pageSink = &imgstream.DirSink{Dir: m.images, Volatile: true}
	defer d.dropMigrationDir(name)
	defer m.dropReceived()
	go m.dispatch(ctx)
	if hello.Live {
		if m.prep, err = d.prepareRun(ctx, name, true); err != nil {
			return err
		}
		r.Add(m.prep.abort)
	}
	if err := sess.Send(migration.Message{Type: migration.MsgAccepted, Address: inst.Address}); err != nil {
		return err
	}

	for {
		var msg migration.Message
		if err := sess.Recv(ctx, &msg); err != nil {
			return err
		}
		switch msg.Type {
		case migration.MsgDisk:
			if err := m.injectFault(faultRecvDisk); err != nil {
				return err
			}
			if err := m.receiveDisk(ctx, recv, syncer, msg, r); err != nil {
				return err
			}
		case migration.MsgImages:
			if err := m.receiveImages(ctx, msg.Pages); err != nil {
				return err
			}
		case migration.MsgSnapshot:
			if err := m.receiveSnapshot(ctx, recv, syncer, msg, r); err != nil {
				return err
			}
		case migration.MsgStart:
			if err := m.injectFault(faultBeforeRestore); err != nil {
				return err
			}
			if err := m.start(ctx, r); err != nil {
				return err
			}
			// From here the container lives on this host.
			release()
			return m.finish(ctx)
		case migration.MsgError:
			return fmt.Errorf("%w: %s", migration.ErrRemote, msg.Error)
		default:
			return fmt.Errorf("%w: unexpected %q", migration.ErrProtocol, msg.Type)
		}
	}
}

// reserve stores the incoming instance's record, keeping its address (a
// move) or giving it a new one (a copy).
func (d *Daemon) reserve(inst *state.Instance, keepAddress bool) error {
	d.addrMu.Lock()
	defer d.addrMu.Unlock()
	used, err := d.state.UsedAddresses()
	if err != nil {
		return err
	}
	if keepAddress {
		if err := d.net.CheckAddress(inst.Address, used); err != nil {
			return errorf(ErrConflict, "address %s of %s is not available on %s: %w", inst.Address, inst.Name, d.cfg.Name, err)
		}
	} else if inst.Address, err = d.net.Allocate(used); err != nil {
		return errorf(ErrConflict, "%w", err)
	}
	inst.State = state.StateStopped
	if err := d.state.CreateInstance(*inst); err != nil {
		if errors.Is(err, state.ErrExists) {
			return errorf(ErrConflict, "instance %q already exists on %s", inst.Name, d.cfg.Name)
		}
		return err
	}
	return nil
}

// receiveDisk stores one disk stream and makes it durable before it
// acknowledges: the source freezes only after everything sent so far is on
// this host's disk.
func (m *incoming) receiveDisk(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer, msg migration.Message, r *revert.Reverter) error {
	st, err := m.nextStream(ctx, m.diskCh)
	if err != nil {
		return err
	}
	defer st.Close()
	p := startProgress(m.op, map[string]any{"phase": "receive disk", "iteration": msg.Iteration})
	cr := &migration.CountingReader{R: io.TeeReader(st, p)}
	if msg.Snapshot != "" && recv != nil {
		vol := storage.Volume{Type: storage.VolumeSnapshot, Name: m.name + "/" + msg.Snapshot}
		err = recv.ReceiveVolume(ctx, vol, cr)
		if err == nil {
			m.received = append(m.received, vol)
			err = recv.Sync(ctx)
		}
	} else if syncer != nil {
		// A tree-sync pass goes straight into the container volume.
		vol := containerVolume(m.name)
		if !m.treeVolume {
			m.treeVolume = true
			r.Add(func() { _ = m.d.storage.DeleteVolume(context.Background(), vol) })
		}
		err = syncer.ApplySync(ctx, vol, cr)
		if err == nil {
			err = syncer.Sync(ctx)
		}
	} else {
		err = fmt.Errorf("%w: a tree-sync pass for a snapshot driver", migration.ErrProtocol)
	}
	p.end()
	if err != nil {
		return fmt.Errorf("receive disk: %w", err)
	}
	return m.sess.Send(migration.Message{Type: migration.MsgDiskSynced, Iteration: msg.Iteration, Bytes: cr.N})
}

// receiveImages stores the checkpoint images and waits for the page files
// streamed during the dump. None of it is synced: the restore reads them
// right away, and after a crash they are deleted and the source resumes.
func (m *incoming) receiveImages(ctx context.Context, pages []string) error {
	st, err := m.nextStream(ctx, m.imagesCh)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := migration.ReceiveDir(st, m.images)
	if err != nil {
		return err
	}
	if err := m.waitPages(ctx, pages); err != nil {
		return fmt.Errorf("receive memory pages: %w", err)
	}
	return m.sess.Send(migration.Message{Type: migration.MsgImagesDone, Bytes: n})
}

// dispatch routes the source's data streams by kind until the session ends.
func (m *incoming) dispatch(ctx context.Context) {
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		switch h.Kind {
		case migration.StreamDisk:
			m.diskCh <- st
		case migration.StreamImages:
			m.imagesCh <- st
		case migration.StreamLogs:
			m.logsCh <- st
		case migration.StreamPage:
			go m.receivePage(ctx, st, h.Name)
		default:
			st.Close()
		}
	}
}

// nextStream waits for the next data stream of one kind.
func (m *incoming) nextStream(ctx context.Context, ch chan net.Conn) (net.Conn, error) {
	select {
	case st := <-ch:
		return st, nil
	case <-m.sess.Closed():
		return nil, errors.New("migration: connection to peer lost")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// receivePage stores one page file with large aligned direct writes.
func (m *incoming) receivePage(ctx context.Context, st net.Conn, name string) {
	defer st.Close()
	err := m.pageSink.Store(ctx, name, st)
	m.pagesMu.Lock()
	m.pagesDone[name] = err
	close(m.pagesChanged)
	m.pagesChanged = make(chan struct{})
	m.pagesMu.Unlock()
}

// waitPages waits until every named page file is stored, then makes their
// names durable.
func (m *incoming) waitPages(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	for {
		m.pagesMu.Lock()
		missing, changed := 0, m.pagesChanged
		var failed error
		for _, n := range names {
			if err, ok := m.pagesDone[n]; !ok {
				missing++
			} else if err != nil && failed == nil {
				failed = err
			}
		}
		m.pagesMu.Unlock()
		switch {
		case failed != nil:
			return failed
		case missing == 0:
			return m.pageSink.SyncDir()
		}
		select {
		case <-changed:
		case <-m.sess.Closed():
			return errors.New("migration: connection to peer lost")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// receiveSnapshot stores one of the instance's snapshots: its disk (as the
// difference from the snapshot before), its checkpoint if stateful, and
// its record. A failed migration removes it again (r).
func (m *incoming) receiveSnapshot(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer, msg migration.Message, r *revert.Reverter) error {
	d, rec := m.d, msg.Record
	if rec == nil {
		return fmt.Errorf("%w: snapshot without a record", migration.ErrProtocol)
	}
	if err := ValidateName("snapshot", rec.Name); err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	vol := snapshotVolume(m.name, rec.Name)
	st, err := m.nextStream(ctx, m.diskCh)
	if err != nil {
		return err
	}
	if recv != nil {
		err = recv.ReceiveVolume(ctx, vol, st)
	} else {
		err = syncer.ApplySync(ctx, vol, st)
	}
	st.Close()
	if err != nil {
		return fmt.Errorf("receive snapshot %s: %w", rec.Name, err)
	}
	r.Add(func() { _ = d.storage.DeleteVolume(bg, vol) })
	if rec.Stateful {
		ck := checkpointVolume(m.name, rec.Name)
		if err := d.storage.CreateVolume(ctx, ck); err != nil {
			return err
		}
		r.Add(func() { _ = d.storage.DeleteVolume(bg, ck) })
		st, err := m.nextStream(ctx, m.imagesCh)
		if err != nil {
			return err
		}
		_, err = migration.ReceiveDir(st, d.storage.Path(ck))
		st.Close()
		if err != nil {
			return fmt.Errorf("receive checkpoint of snapshot %s: %w", rec.Name, err)
		}
	}
	if err := syncPool(ctx, recv, syncer); err != nil {
		return err
	}
	if err := d.state.CreateSnapshot(state.Snapshot{Instance: m.name, Name: rec.Name, Created: rec.Created,
		Stateful: rec.Stateful, DiskBytes: rec.DiskBytes, MemoryBytes: rec.MemoryBytes, FrozenMs: rec.FrozenMs,
		Config: rec.Config, OS: state.OS(rec.OS)}); err != nil {
		return err
	}
	r.Add(func() { _ = d.state.DeleteSnapshot(m.name, rec.Name) })
	return m.sess.Send(migration.Message{Type: migration.MsgSnapshotOK})
}

// start makes the container's volume from the last received disk and
// runs it: a CRIU restore after a live move, a start after a cold one.
func (m *incoming) start(ctx context.Context, r *revert.Reverter) error {
	d := m.d
	if len(m.received) == 0 && !m.treeVolume {
		return fmt.Errorf("%w: start before any disk", migration.ErrProtocol)
	}
	t0 := time.Now()
	if !m.treeVolume {
		vol := containerVolume(m.name)
		if err := d.storage.CloneVolume(ctx, vol, m.received[len(m.received)-1], false); err != nil {
			return fmt.Errorf("create root filesystem: %w", err)
		}
		r.Add(func() { _ = d.storage.DeleteVolume(context.Background(), vol) })
	}
	d.log.Debug("migration target: root filesystem ready", "name", m.name, "took", time.Since(t0))
	switch {
	case m.hello.Live:
		if err := m.restore(ctx); err != nil {
			return err
		}
	case m.hello.Start:
		if err := d.startLocked(ctx, m.name); err != nil {
			return err
		}
	}
	r.Success()
	// Complete here: the journal goes before the source hears it, so a
	// crash from now on never deletes what the source deletes too.
	d.removeJournal(m.name)
	return m.sess.Send(migration.Message{Type: migration.MsgResumed, RestoreSeconds: migration.Seconds(time.Since(t0))})
}

// restore brings the checkpointed processes back. With lazy memory a
// lazy-pages daemon fetches pages from the source's page server through the
// session (one local port tunnelled to the source).
func (m *incoming) restore(ctx context.Context) error {
	d := m.d
	if err := m.injectFault(faultRestore); err != nil {
		return err
	}
	lazy := m.hello.Memory == migration.MemoryLazy
	var lp *runtime.LazyPages
	if lazy {
		tlp := time.Now()
		port, err := m.tunnelPages(ctx)
		if err != nil {
			return err
		}
		if lp, err = d.rt.StartLazyPages(ctx, runtime.LazyPagesOptions{ImagePath: m.images, WorkPath: m.work, Address: "127.0.0.1", Port: port}); err != nil {
			return err
		}
		if err := lp.WaitReady(ctx, m.work); err != nil {
			lp.Kill()
			return err
		}
		d.log.Debug("migration target: lazy-pages daemon ready", "name", m.name, "took", time.Since(tlp))
		m.lazy = lp
	}
	t0 := time.Now()
	defer func() { d.log.Debug("migration target: restore", "name", m.name, "took", time.Since(t0)) }()
	// The source is frozen until we answer: a stuck restore is stopped.
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RestoreTimeout)
	defer cancel()
	err := d.launchPrepared(ctx, m.prep, func(bundle, logPath string) (runtime.Process, error) {
		defer func() {
			d.log.Debug("migration target: runc restore returned", "name", m.name, "after", time.Since(t0))
		}()
		return d.rt.Restore(rctx, m.name, bundle, runtime.RestoreOptions{
			StartOptions: runtime.StartOptions{LogPath: logPath},
			ImagePath:    m.images, WorkPath: m.work, LazyPages: lazy, TCPEstablished: true,
			Hang: m.d.fault(faultRestore) == "hang",
		})
	})
	if err != nil && lp != nil {
		lp.Kill()
	}
	if err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		d.killCgroupTasks(m.name)
		err = fmt.Errorf("the restore did not finish within %s and was stopped: %w", d.cfg.RestoreTimeout, err)
	}
	return err
}

// tunnelPages listens on a local port for the lazy-pages daemon and
// forwards each connection to the source's page server over the session.
func (m *incoming) tunnelPages(ctx context.Context) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() {
		<-m.sess.Closed()
		ln.Close()
	}()
	go func() {
		defer ln.Close()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPageServer})
			if err != nil {
				c.Close()
				return
			}
			go func() {
				defer c.Close()
				defer st.Close()
				pipe(c, &countingConn{Conn: st, n: &m.pageBytes})
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// finish waits for the post-copy to end (lazy) and for the source to
// commit; the container stays here whatever happens now.
func (m *incoming) finish(ctx context.Context) error {
	d := m.d
	if m.lazy != nil {
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

// receiveLogs keeps the source's console log as the rotated file, which the
// log reader shows before the current one (what the container writes here).
func (m *incoming) receiveLogs(ctx context.Context) error {
	st, err := m.nextStream(ctx, m.logsCh)
	if err != nil {
		return err
	}
	defer st.Close()
	f, err := os.OpenFile(m.d.cfg.logPath(m.name)+".1", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, st)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// injectFault acts out a fault injected at point (tests): "cut" drops the
// connection like a vanished peer, "fail" reports an error.
func (m *incoming) injectFault(point string) error {
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

// dropReceived deletes the received transfer snapshots.
func (m *incoming) dropReceived() {
	for i := len(m.received) - 1; i >= 0; i-- {
		_ = m.d.storage.DeleteVolume(context.Background(), m.received[i])
	}
}

// countingConn counts bytes read from the tunnel (pages coming in).
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// syncPool makes received data durable with whichever interface the driver
// has.
func syncPool(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer) error {
	if recv != nil {
		return recv.Sync(ctx)
	}
	return syncer.Sync(ctx)
}
