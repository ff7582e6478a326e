package storage

import (
	"context"
	"fmt"
	"io"
)

// dirSender sends a volume in rsync-style passes over its live tree
// (format tar-sync/1, dir_sync.go), keeping between passes the manifest of
// what it sent. base is ignored: a dir pool cannot diff two trees cheaply,
// so a first pass is always whole.
type dirSender struct {
	d    *dirDriver
	st   transferState
	prev manifest // what the passes so far sent; nil before the first
}

// NewSender implements Driver.
func (d *dirDriver) NewSender(vol Volume, base *Volume) (VolumeSender, error) {
	if err := checkTransfer(vol, base); err != nil {
		return nil, err
	}
	if err := checkExisting(vol, d.Path(vol)); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	return &dirSender{d: d, st: transferState{vol: vol}}, nil
}

// SendPass implements VolumeSender.
func (s *dirSender) SendPass(ctx context.Context, w io.Writer) error {
	if err := s.st.beginPass(); err != nil {
		return err
	}
	m, err := writePass(ctx, s.d.Path(s.st.vol), s.prev, w)
	if err != nil {
		return s.st.endPass(fmt.Errorf("send %s: %w", s.st.vol, err))
	}
	s.prev = m
	return s.st.endPass(nil)
}

// Close implements VolumeSender: the sender keeps nothing in the pool.
func (s *dirSender) Close(ctx context.Context) error {
	s.st.closed, s.prev = true, nil
	return nil
}

// dirReceiver applies passes straight to the volume, which the first pass
// creates.
type dirReceiver struct {
	d       *dirDriver
	st      transferState
	created bool // the volume exists and is this receiver's to remove
}

// NewReceiver implements Driver.
func (d *dirDriver) NewReceiver(vol Volume) (VolumeReceiver, error) {
	if err := checkTransfer(vol, nil); err != nil {
		return nil, err
	}
	if err := checkNew(vol, d.Path(vol)); err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	return &dirReceiver{d: d, st: transferState{vol: vol}}, nil
}

// ReceivePass implements VolumeReceiver. A failed pass leaves a tree that
// is neither the old one nor the new one, so it removes the volume.
func (r *dirReceiver) ReceivePass(ctx context.Context, rd io.Reader) error {
	if err := r.st.beginPass(); err != nil {
		return err
	}
	err := r.receivePass(ctx, rd)
	if err != nil && r.created {
		if derr := r.d.DeleteVolume(context.WithoutCancel(ctx), r.st.vol); derr != nil {
			err = fmt.Errorf("%w (and removing the volume: %w)", err, derr)
		} else {
			r.created = false
		}
	}
	return r.st.endPass(err)
}

// receivePass creates the volume on the first pass and applies the pass.
func (r *dirReceiver) receivePass(ctx context.Context, rd io.Reader) error {
	if !r.created {
		if err := r.d.CreateVolume(ctx, r.st.vol); err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		r.created = true
	}
	if err := applyPass(ctx, r.d.Path(r.st.vol), rd); err != nil {
		return fmt.Errorf("receive %s: pass %d: %w", r.st.vol, r.st.passes, err)
	}
	return nil
}

// Commit implements VolumeReceiver: a snapshot volume is made read-only
// as SetReadOnly does it (the dir driver does not enforce read-only); the
// volume is the pool's from now on.
func (r *dirReceiver) Commit(ctx context.Context) error {
	if err := r.st.beginCommit(); err != nil {
		return err
	}
	if r.st.vol.Type == VolumeSnapshot {
		if err := r.d.SetReadOnly(ctx, r.st.vol, true); err != nil {
			return fmt.Errorf("commit %s: %w", r.st.vol, err)
		}
	}
	r.st.committed, r.created = true, false
	return nil
}

// Close implements VolumeReceiver: without a Commit it removes the volume.
func (r *dirReceiver) Close(ctx context.Context) error {
	r.st.closed = true
	if !r.created {
		return nil
	}
	if err := r.d.DeleteVolume(context.WithoutCancel(ctx), r.st.vol); err != nil {
		return fmt.Errorf("close receive of %s: %w", r.st.vol, err)
	}
	r.created = false
	return nil
}

// DropTransfers implements Driver. Transfers keep nothing in a dir pool
// outside the volume a receiver was filling, which the caller removes.
func (d *dirDriver) DropTransfers(ctx context.Context, name string) error {
	if err := validateNameElem(name); err != nil {
		return fmt.Errorf("drop transfers of %q: %w: %w", name, err, ErrInvalidVolume)
	}
	return nil
}
