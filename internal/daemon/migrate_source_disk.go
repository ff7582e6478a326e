package daemon

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// Disks move through the storage driver's one transfer interface
// (storage.VolumeSender): whole, then in passes of what changed, each on a
// stream of its own that the target makes durable before it acknowledges.
// The daemon never asks which driver it is.

// sendSnapshots sends the instance's snapshots, oldest first, each disk as
// the difference from the one before where the driver can (and a stateful
// one's checkpoint, unless a copy cannot use it: snapshotForCopy); the newest becomes the base of the container's first
// pre-copy pass, so the container's disk then moves as a difference too.
func (m *migrationSource) sendSnapshots(ctx context.Context, snaps []state.Snapshot) error {
	var prev *storage.Volume
	for i, s := range snaps {
		m.op.SetMetadata(map[string]any{"phase": "snapshots", "snapshot": s.Name, "iteration": i})
		if m.req.Copy {
			s = snapshotForCopy(s, isVM(m.inst)) // instance_copy.go
		}
		rec := migration.SnapshotRecord{Name: s.Name, Created: s.Created, Stateful: s.Stateful, DiskBytes: s.DiskBytes,
			MemoryBytes: s.MemoryBytes, FrozenMs: s.FrozenMs, Config: s.Config, OS: migration.OS(s.OS), ForeignIdentity: s.ForeignIdentity,
			// A record from before TakenAs: taken, at the latest, under
			// the name the instance has now.
			TakenAs: cmp.Or(s.TakenAs, s.Instance)}
		if err := m.sess.Send(migration.Message{Type: migration.MsgSnapshot, Record: &rec}); err != nil {
			return err
		}
		vol := snapshotVolume(m.name, s.Name)
		if err := m.sendSnapshot(ctx, vol, prev); err != nil {
			return fmt.Errorf("send snapshot %s: %w", s.Name, err)
		}
		if s.Stateful {
			st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
			if err != nil {
				return err
			}
			_, err = migration.SendDir(st, m.d.storage.Path(checkpointVolume(m.name, s.Name)))
			st.Close()
			if err != nil {
				return fmt.Errorf("send checkpoint of snapshot %s: %w", s.Name, err)
			}
		}
		if _, err := m.sess.Expect(ctx, migration.MsgSnapshotOK); err != nil {
			return fmt.Errorf("target could not store snapshot %s: %w", s.Name, err)
		}
		prev = &vol
	}
	m.base = prev
	return nil
}

// sendSnapshot sends one snapshot volume, relative to base, on a disk
// stream.
func (m *migrationSource) sendSnapshot(ctx context.Context, vol storage.Volume, base *storage.Volume) error {
	snd, err := m.d.storage.NewSender(vol, base)
	if err != nil {
		return err
	}
	defer func() { m.d.undo("close snapshot sender", m.name, snd.Close(context.WithoutCancel(ctx))) }()
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
	if err != nil {
		return err
	}
	err = snd.SendPass(ctx, st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// precopy sends the disk while the container runs: a full pass, then the
// changes since the previous pass, until a pass is small or the passes stop
// shrinking. The target makes each one durable before the next.
func (m *migrationSource) precopy(ctx context.Context) error {
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

// sendDisk sends a pass of the container's disk (all of it first, then
// what changed since the previous pass) and waits until the target has it
// on disk.
func (m *migrationSource) sendDisk(ctx context.Context, final bool) (int64, error) {
	if m.disk == nil {
		snd, err := m.d.storage.NewSender(containerVolume(m.name), m.base)
		if err != nil {
			return 0, fmt.Errorf("send disk: %w", err)
		}
		m.disk = snd
	}
	i := m.passes
	m.passes++
	if err := m.sess.Send(migration.Message{Type: migration.MsgDisk, Iteration: i, Final: final}); err != nil {
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
	p := startProgress(m.op, map[string]any{"phase": phase, "iteration": i, api.MetaBytes: 0}, nil)
	tSend := time.Now()
	serr := m.disk.SendPass(ctx, io.MultiWriter(st, p))
	st.Close()
	m.d.log.Debug("migration source: disk pass sent", "name", m.name, "final", final, "took", time.Since(tSend))
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
func (m *migrationSource) sendImages(ctx context.Context, dir string, pages []string) (int64, error) {
	if err := m.sess.Send(migration.Message{Type: migration.MsgImages, Pages: pages}); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	n, err := migration.SendDir(st, dir)
	st.Close()
	if err != nil {
		return n, fmt.Errorf("send checkpoint images: %w", err)
	}
	m.d.log.Debug("migration source: images written to the stream", "name", m.name, "took", time.Since(t0))
	if _, err := m.sess.Expect(ctx, migration.MsgImagesDone); err != nil {
		return n, err
	}
	return n, nil
}
