package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// btrfsSender sends a volume as btrfs send streams. A container volume is
// snapshotted read-only for each pass (transfer snapshot
// snapshots/NAME/.migrate-I, taken by ioctl: the container may be frozen)
// and each pass sent as the difference from the pass before, the first
// from base (or whole). A snapshot volume is sent itself, in one pass.
type btrfsSender struct {
	d     *btrfsDriver
	st    transferState
	base  *Volume
	snaps []Volume // transfer snapshots taken, oldest first
}

// NewSender implements Driver.
func (d *btrfsDriver) NewSender(vol Volume, base *Volume) (VolumeSender, error) {
	if err := checkTransfer(vol, base); err != nil {
		return nil, err
	}
	if err := d.checkMounted(); err != nil {
		return nil, err
	}
	if err := checkExisting(vol, d.Path(vol)); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	s := &btrfsSender{d: d, st: transferState{vol: vol}}
	if base != nil {
		b := *base
		s.base = &b
	}
	return s, nil
}

// SendPass implements VolumeSender.
func (s *btrfsSender) SendPass(ctx context.Context, w io.Writer) error {
	if err := s.st.beginPass(); err != nil {
		return err
	}
	return s.st.endPass(s.sendPass(ctx, w))
}

// sendPass sends the snapshot volume, or a new transfer snapshot of the
// container volume.
func (s *btrfsSender) sendPass(ctx context.Context, w io.Writer) error {
	if s.st.vol.Type == VolumeSnapshot {
		return s.d.send(ctx, s.st.vol, s.base, w)
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	parent := s.base
	if n := len(s.snaps); n > 1 {
		parent = &s.snaps[n-2]
	}
	return s.d.send(ctx, snap, parent, w)
}

// snapshot takes the container volume's next transfer snapshot; a
// leftover of a crashed transfer with its name is deleted first.
func (s *btrfsSender) snapshot(ctx context.Context) (Volume, error) {
	snap := transferSnapshot(s.st.vol.Name, len(s.snaps))
	if err := s.d.DeleteVolume(ctx, snap); err != nil {
		return Volume{}, fmt.Errorf("send %s: remove leftover: %w", s.st.vol, err)
	}
	if err := s.d.CloneVolume(ctx, snap, s.st.vol, true); err != nil {
		return Volume{}, fmt.Errorf("send %s: %w", s.st.vol, err)
	}
	s.snaps = append(s.snaps, snap)
	return snap, nil
}

// Close implements VolumeSender: it deletes the transfer snapshots.
func (s *btrfsSender) Close(ctx context.Context) error {
	s.st.closed = true
	return deleteVolumes(ctx, s.d, &s.snaps)
}

// btrfsReceiver receives btrfs send streams. Pass I of a container volume
// becomes the read-only subvolume snapshots/NAME/.migrate-I (NAME is the
// receiver's container name), and Commit clones the last one into the
// writable container volume. A snapshot volume is received as itself.
type btrfsReceiver struct {
	d     *btrfsDriver
	st    transferState
	got   []Volume     // subvolumes received and not yet handed over, oldest first
	spare *receiveProc // the next pass's btrfs receive, started early (PrepareNextPass)
}

// NewReceiver implements Driver.
func (d *btrfsDriver) NewReceiver(vol Volume) (VolumeReceiver, error) {
	if err := checkTransfer(vol, nil); err != nil {
		return nil, err
	}
	if err := d.checkMounted(); err != nil {
		return nil, err
	}
	if err := checkNew(vol, d.Path(vol)); err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	return &btrfsReceiver{d: d, st: transferState{vol: vol}}, nil
}

// ReceivePass implements VolumeReceiver.
func (r *btrfsReceiver) ReceivePass(ctx context.Context, rd io.Reader) error {
	if err := r.st.beginPass(); err != nil {
		return err
	}
	return r.st.endPass(r.receivePass(ctx, rd))
}

// receivePass receives the snapshot volume, or the container volume's
// next transfer snapshot (a leftover of a crashed transfer with its name
// is deleted first).
func (r *btrfsReceiver) receivePass(ctx context.Context, rd io.Reader) error {
	into := r.st.vol
	if into.Type == VolumeContainer {
		into = transferSnapshot(into.Name, r.st.passes)
		if err := r.d.DeleteVolume(ctx, into); err != nil {
			return fmt.Errorf("receive %s: remove leftover: %w", r.st.vol, err)
		}
	}
	spare := r.spare
	r.spare = nil
	if err := r.d.receive(ctx, into, rd, spare); err != nil {
		if into != r.st.vol {
			return fmt.Errorf("receive %s: pass %d: %w", r.st.vol, r.st.passes, err)
		}
		return err
	}
	r.got = append(r.got, into)
	return nil
}

// Commit implements VolumeReceiver: a container volume becomes a writable
// snapshot of the last pass; a received snapshot volume is read-only
// already and now the pool's.
func (r *btrfsReceiver) Commit(ctx context.Context) error {
	if err := r.st.beginCommit(); err != nil {
		return err
	}
	if r.st.vol.Type == VolumeSnapshot {
		r.got = nil
	} else if err := r.d.CloneVolume(ctx, r.st.vol, r.got[len(r.got)-1], false); err != nil {
		return fmt.Errorf("commit %s: %w", r.st.vol, err)
	}
	r.st.committed = true
	return nil
}

// PrepareNextPass implements PassPreparer: the next pass of a container
// volume gets its btrfs receive started now (the exec and the jail, most of
// a small pass's time), to be fed when the pass arrives. A snapshot volume
// has one pass, and nothing is prepared for it.
func (r *btrfsReceiver) PrepareNextPass(ctx context.Context) error {
	if r.st.vol.Type != VolumeContainer || r.spare != nil || r.st.closed || r.st.committed {
		return nil
	}
	dir := filepath.Dir(r.d.Path(transferSnapshot(r.st.vol.Name, r.st.passes)))
	p, err := r.d.startReceive(dir)
	if err != nil {
		return fmt.Errorf("prepare the next pass of %s: %w", r.st.vol, err)
	}
	r.spare = p
	return nil
}

// Close implements VolumeReceiver: it deletes the transfer snapshots, and
// a snapshot volume not committed; a prepared btrfs receive never fed is
// ended.
func (r *btrfsReceiver) Close(ctx context.Context) error {
	r.st.closed = true
	if r.spare != nil {
		r.spare.end()
		r.spare = nil
	}
	return deleteVolumes(ctx, r.d, &r.got)
}

// DropTransfers implements Driver: it deletes snapshots/name/.migrate-*,
// the transfer snapshots of a sender or receiver never closed (and any a
// crash left half received).
func (d *btrfsDriver) DropTransfers(ctx context.Context, name string) error {
	if err := d.checkMounted(); err != nil {
		return err
	}
	vols, err := transferLeftovers(d.root, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, vol := range vols {
		if err := d.DeleteVolume(ctx, vol); err != nil {
			errs = append(errs, fmt.Errorf("drop transfers: %w", err))
		}
	}
	return errors.Join(errs...)
}
