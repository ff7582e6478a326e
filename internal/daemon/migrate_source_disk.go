package daemon

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// sendSnapshots sends the instance's snapshots, oldest first, each disk as
// the difference from the one before (and a stateful one's checkpoint);
// the newest becomes the parent of the first pre-copy pass, so the
// container's disk then moves as a difference too.
func (m *migrationSource) sendSnapshots(ctx context.Context, snaps []state.Snapshot) error {
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

// sendDisk sends the container's disk, or what changed since the previous
// pass, and waits until the target has it on disk.
func (m *migrationSource) sendDisk(ctx context.Context, final bool) (int64, error) {
	if _, ok := m.d.storage.(storage.Sender); !ok {
		return m.syncTree(ctx, final)
	}
	return m.sendSnapshotDisk(ctx, final)
}

// syncTree is a pass of a driver without send streams (dir): the live
// tree's changed entries since the previous pass, rsync-style, straight
// into the target's container volume.
func (m *migrationSource) syncTree(ctx context.Context, final bool) (int64, error) {
	i := m.passes
	m.passes++
	if err := m.sess.Send(migration.Message{Type: migration.MsgDisk, Iteration: i, Final: final}); err != nil {
		return 0, err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
	if err != nil {
		return 0, err
	}
	p := startProgress(m.op, map[string]any{"phase": map[bool]string{false: "precopy", true: "final disk"}[final], "iteration": i, api.MetaBytes: 0}, nil)
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
func (m *migrationSource) sendSnapshotDisk(ctx context.Context, final bool) (int64, error) {
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
	p := startProgress(m.op, map[string]any{"phase": phase, "iteration": i, api.MetaBytes: 0}, nil)
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
func (m *migrationSource) sendImages(ctx context.Context, dir string, pages []string) (int64, error) {
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
