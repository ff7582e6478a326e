package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// receiveDisk stores one pass of the container's disk and makes it
// durable before it acknowledges: the source freezes only after
// everything sent so far is on this host's disk.
func (m *migrationTarget) receiveDisk(ctx context.Context, msg migration.Message) error {
	st, err := m.nextStream(ctx, m.diskCh)
	if err != nil {
		return err
	}
	defer st.Close()
	if m.disk == nil {
		if m.disk, err = m.d.storage.NewReceiver(containerVolume(m.name)); err != nil {
			return fmt.Errorf("receive disk: %w", err)
		}
	}
	p := startProgress(m.op, map[string]any{"phase": "receive disk", "iteration": msg.Iteration}, nil)
	cr := &migration.CountingReader{R: io.TeeReader(st, p)}
	tRecv := time.Now()
	err = m.disk.ReceivePass(ctx, cr)
	m.d.log.Debug("migration target: disk pass received", "name", m.name, "final", msg.Final, "took", time.Since(tRecv), "bytes", cr.N)
	switch {
	case err != nil:
	case msg.Final && m.hello.Live && m.d.storage.Info().DurableCommit:
		// The volume is made now: that makes the pass durable too.
		err = m.commitDisk(ctx)
	case msg.Final:
		err = m.d.storage.Sync(ctx)
	default:
		err = m.syncAndPrepare(ctx)
	}
	p.end()
	if err != nil {
		return fmt.Errorf("receive disk: %w", err)
	}
	return m.sess.Send(migration.Message{Type: migration.MsgDiskSynced, Iteration: msg.Iteration, Bytes: cr.N})
}

// syncAndPrepare syncs a pass that another follows (the final one, at
// the latest) and, beside the sync and before the acknowledgement, readies
// the receiver for it where the driver can (storage.PassPreparer): the
// source may freeze the container as soon as it has the acknowledgement,
// and what is readied here is then not in the frozen window. A failed
// preparation is logged; the next pass starts from nothing, as without it.
func (m *migrationTarget) syncAndPrepare(ctx context.Context) error {
	pp, ok := m.disk.(storage.PassPreparer)
	if !ok {
		return m.d.storage.Sync(ctx)
	}
	prepared := make(chan error, 1)
	go func() {
		t0 := time.Now()
		err := pp.PrepareNextPass(ctx)
		m.d.log.Debug("migration target: next disk pass prepared", "name", m.name, "took", time.Since(t0))
		prepared <- err
	}()
	err := m.d.storage.Sync(ctx)
	if perr := <-prepared; perr != nil {
		m.d.log.Warn("migration target: next disk pass not prepared", "name", m.name, "err", perr)
	}
	return err
}

// receiveImages stores the checkpoint images and waits for the page files
// streamed during the dump. None of it is synced: the restore reads them
// right away, and after a crash they are deleted and the source resumes.
func (m *migrationTarget) receiveImages(ctx context.Context, pages []string) error {
	st, err := m.nextStream(ctx, m.imagesCh)
	if err != nil {
		return err
	}
	defer st.Close()
	t0 := time.Now()
	n, err := migration.ReceiveDir(m.budget.reader(st), m.images)
	if err != nil {
		return fmt.Errorf("receive checkpoint images: %w", err)
	}
	t1 := time.Now()
	if m.memPasses > 0 {
		// The final dump's parent is the last memory pass.
		if err := linkParent(m.images, m.memPasses-1); err != nil {
			return err
		}
	}
	if err := m.waitPages(ctx, pages); err != nil {
		return fmt.Errorf("receive memory pages: %w", err)
	}
	m.imagesIn.Store(true)
	m.d.log.Debug("migration target: images received", "name", m.name, "bytes", n,
		"took", t1.Sub(t0), "then pages", time.Since(t1))
	return m.sess.Send(migration.Message{Type: migration.MsgImagesDone, Bytes: n})
}

// dispatch routes the source's data streams by kind until the session ends.
func (m *migrationTarget) dispatch(ctx context.Context) {
	pages := 0
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		if m.streams++; m.streams > migrationMaxStreams {
			st.Close()
			m.abort(errorf(ErrInvalid, "more than %d data streams in one migration", migrationMaxStreams))
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
			if m.imagesIn.Load() {
				st.Close()
				m.abort(fmt.Errorf("%w: a page file after the images", migration.ErrProtocol))
				return
			}
			if pages++; pages == 1 {
				// The source's dump is under way, and blocks on this
				// stream until it is read.
				if err := m.injectFault(faultRecvPages); err != nil {
					st.Close()
					m.abort(err)
					return
				}
			}
			// At most migrationPageStreams at once: each holds
			// buffers; more wait here (and so does the peer).
			select {
			case m.pageSlots <- struct{}{}:
			case <-ctx.Done():
				st.Close()
				return
			}
			go func() {
				defer func() { <-m.pageSlots }()
				m.receivePage(ctx, st, h.Name)
			}()
		default:
			st.Close()
		}
	}
}

// nextStream waits for the next data stream of one kind.
func (m *migrationTarget) nextStream(ctx context.Context, ch chan net.Conn) (net.Conn, error) {
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
func (m *migrationTarget) receivePage(ctx context.Context, st net.Conn, name string) {
	defer st.Close()
	err := m.pageSink.Store(ctx, name, m.budget.reader(st))
	if errors.Is(err, errImageBudget) {
		// Nothing waits for this page file yet, perhaps: end the session.
		m.abort(err)
	}
	m.pagesMu.Lock()
	m.pagesDone[name] = err
	close(m.pagesChanged)
	m.pagesChanged = make(chan struct{})
	m.pagesMu.Unlock()
}

// waitPages waits until every named page file is stored, then makes their
// names durable.
func (m *migrationTarget) waitPages(ctx context.Context, names []string) error {
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
// difference from the snapshot before, where the driver can), its
// checkpoint if stateful, and its record. A failed migration removes it
// again (r).
func (m *migrationTarget) receiveSnapshot(ctx context.Context, msg migration.Message, r *revert.Reverter) error {
	d, rec := m.d, msg.Record
	if rec == nil {
		return fmt.Errorf("%w: snapshot without a record", migration.ErrProtocol)
	}
	if err := ValidateName("snapshot", rec.Name); err != nil {
		return err
	}
	if err := validateConfig(rec.Config); err != nil {
		return fmt.Errorf("snapshot %s: %w", rec.Name, err)
	}
	bg := context.WithoutCancel(ctx)
	vol := snapshotVolume(m.name, rec.Name)
	if err := m.receiveSnapshotDisk(ctx, vol); err != nil {
		return fmt.Errorf("receive snapshot %s: %w", rec.Name, err)
	}
	r.Add(func() { d.undo("delete snapshot volume", m.name, d.storage.DeleteVolume(bg, vol)) })
	if rec.Stateful {
		ck := checkpointVolume(m.name, rec.Name)
		if err := d.storage.CreateVolume(ctx, ck); err != nil {
			return err
		}
		r.Add(func() { d.undo("delete checkpoint volume", m.name, d.storage.DeleteVolume(bg, ck)) })
		limit, err := m.prepareCheckpoint(ck, rec.Config) // migrate_vm_cold.go
		if err != nil {
			return err
		}
		st, err := m.nextStream(ctx, m.imagesCh)
		if err != nil {
			return err
		}
		_, err = migration.ReceiveDir((&imageBudget{limit: limit}).reader(st), d.storage.Path(ck))
		st.Close()
		if err != nil {
			return fmt.Errorf("receive checkpoint of snapshot %s: %w", rec.Name, err)
		}
	}
	if err := d.storage.Sync(ctx); err != nil {
		return err
	}
	if err := d.state.CreateSnapshot(state.Snapshot{Instance: m.name, Name: rec.Name, Created: rec.Created,
		Stateful: rec.Stateful, DiskBytes: rec.DiskBytes, MemoryBytes: rec.MemoryBytes, FrozenMs: rec.FrozenMs,
		Config: rec.Config, OS: state.OS(rec.OS), ForeignIdentity: rec.ForeignIdentity, TakenAs: rec.TakenAs}); err != nil {
		return err
	}
	r.Add(func() { d.undo("delete snapshot record", m.name, d.state.DeleteSnapshot(m.name, rec.Name)) })
	return m.sess.Send(migration.Message{Type: migration.MsgSnapshotOK})
}

// receiveSnapshotDisk receives a snapshot volume's one pass and commits it.
func (m *migrationTarget) receiveSnapshotDisk(ctx context.Context, vol storage.Volume) error {
	rcv, err := m.d.storage.NewReceiver(vol)
	if err != nil {
		return err
	}
	defer func() { m.d.undo("close snapshot receiver", m.name, rcv.Close(context.WithoutCancel(ctx))) }()
	st, err := m.nextStream(ctx, m.diskCh)
	if err != nil {
		return err
	}
	err = rcv.ReceivePass(ctx, st)
	st.Close()
	if err != nil {
		return err
	}
	return rcv.Commit(ctx)
}
