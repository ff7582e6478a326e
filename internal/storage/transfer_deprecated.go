package storage

import (
	"context"
	"fmt"
	"io"
	"os"
)

// This file holds the volume-transfer API that Driver.NewSender and
// Driver.NewReceiver replace. It goes, whole, once the daemon is switched.

// Sender is implemented by drivers that can stream a read-only volume in
// their native format (btrfs send), whole or as the difference from a
// parent volume the receiver already has. Callers find it by type
// assertion.
//
// Deprecated: use Driver.NewSender/NewReceiver (removed once the daemon is switched).
type Sender interface {
	SendVolume(ctx context.Context, vol Volume, parent *Volume, w io.Writer) error
}

// Receiver is the other end of Sender: it reads a stream made by a driver
// of the same kind into a new read-only volume vol (whose last name
// element must be the sent volume's), and can force received data to disk.
//
// Deprecated: use Driver.NewSender/NewReceiver (removed once the daemon is switched).
type Receiver interface {
	ReceiveVolume(ctx context.Context, vol Volume, r io.Reader) error
	// Sync makes everything written to the pool durable (syncfs).
	Sync(ctx context.Context) error
}

// Manifest records what a tree sync pass sent (see TreeSyncer).
//
// Deprecated: use Driver.NewSender/NewReceiver (removed once the daemon is switched).
type Manifest = manifest

// Stamp is an entry's inode state as a tree sync compares it.
//
// Deprecated: use Driver.NewSender/NewReceiver (removed once the daemon is switched).
type Stamp = stamp

// TreeSyncer is implemented by drivers without send streams (dir): a
// volume moves in rsync-style passes over its live tree. Callers find it by
// type assertion.
//
// Deprecated: use Driver.NewSender/NewReceiver (removed once the daemon is switched).
type TreeSyncer interface {
	// SyncVolume writes to w the entries of vol that differ from prev (all
	// of them when prev is nil) and the paths deleted since prev, as a
	// tar-sync/1 pass, and returns the new manifest.
	SyncVolume(ctx context.Context, vol Volume, prev Manifest, w io.Writer) (Manifest, error)
	// ApplySync applies such a pass to vol, creating it if missing.
	ApplySync(ctx context.Context, vol Volume, r io.Reader) error
	// Sync makes everything written to the pool durable.
	Sync(ctx context.Context) error
}

// SendVolume implements Sender with `btrfs send [-p PARENT] VOL`. Both
// volumes must be read-only.
//
// Deprecated: use Driver.NewSender (removed once the daemon is switched).
func (d *btrfsDriver) SendVolume(ctx context.Context, vol Volume, parent *Volume, w io.Writer) error {
	return d.send(ctx, vol, parent, w)
}

// ReceiveVolume implements Receiver with `btrfs receive`.
//
// Deprecated: use Driver.NewReceiver (removed once the daemon is switched).
func (d *btrfsDriver) ReceiveVolume(ctx context.Context, vol Volume, r io.Reader) error {
	return d.receive(ctx, vol, r)
}

// SyncVolume implements TreeSyncer with one tar-sync/1 pass.
//
// Deprecated: use Driver.NewSender (removed once the daemon is switched).
func (d *dirDriver) SyncVolume(ctx context.Context, vol Volume, prev Manifest, w io.Writer) (Manifest, error) {
	root := d.Path(vol)
	if err := checkExisting(vol, root); err != nil {
		return nil, fmt.Errorf("sync %s: %w", vol, err)
	}
	m, err := writePass(ctx, root, prev, w)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", vol, err)
	}
	return m, nil
}

// ApplySync implements TreeSyncer.
//
// Deprecated: use Driver.NewReceiver (removed once the daemon is switched).
func (d *dirDriver) ApplySync(ctx context.Context, vol Volume, r io.Reader) error {
	if err := validateVolume(vol); err != nil {
		return err
	}
	root := d.Path(vol)
	if err := os.MkdirAll(root, volumeMode); err != nil {
		return err
	}
	if err := applyPass(ctx, root, r); err != nil {
		return fmt.Errorf("apply sync to %s: %w", vol, err)
	}
	return nil
}
