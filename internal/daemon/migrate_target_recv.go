package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// receiveDisk stores one disk stream and makes it durable before it
// acknowledges: the source freezes only after everything sent so far is on
// this host's disk.
func (m *migrationTarget) receiveDisk(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer, msg migration.Message, r *revert.Reverter) error {
	st, err := m.nextStream(ctx, m.diskCh)
	if err != nil {
		return err
	}
	defer st.Close()
	p := startProgress(m.op, map[string]any{"phase": "receive disk", "iteration": msg.Iteration}, nil)
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
func (m *migrationTarget) receiveImages(ctx context.Context, pages []string) error {
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
func (m *migrationTarget) dispatch(ctx context.Context) {
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
	err := m.pageSink.Store(ctx, name, st)
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
// difference from the snapshot before), its checkpoint if stateful, and
// its record. A failed migration removes it again (r).
func (m *migrationTarget) receiveSnapshot(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer, msg migration.Message, r *revert.Reverter) error {
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

// syncPool makes received data durable with whichever interface the driver
// has.
func syncPool(ctx context.Context, recv storage.Receiver, syncer storage.TreeSyncer) error {
	if recv != nil {
		return recv.Sync(ctx)
	}
	return syncer.Sync(ctx)
}
