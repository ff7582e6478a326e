package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SnapshotVersion is the format version of Snapshot records.
// Version 2 added ForeignIdentity (absent in a version 1 record: false),
// version 3 TakenAs (absent before: "", the name is not known).
const SnapshotVersion = 3

// Snapshot is a container snapshot's durable record: a read-only copy of
// its disk and, when Stateful, a checkpoint of its memory and processes
// taken at the same frozen instant. Records are keyed "INSTANCE/NAME".
type Snapshot struct {
	Version  int       `json:"version"`
	Instance string    `json:"instance"`
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	// Stateful says a checkpoint (CRIU images) belongs to the snapshot.
	Stateful bool `json:"stateful"`
	// DiskBytes is the size of the snapshot's files, MemoryBytes that of
	// its checkpoint images (0 when not stateful).
	DiskBytes   uint64 `json:"disk_bytes"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// FrozenMs is how long the container was frozen to take the snapshot.
	FrozenMs float64 `json:"frozen_ms"`
	// Config is the container's configuration when the snapshot was taken.
	Config map[string]string `json:"config,omitempty"`
	OS     OS                `json:"os"`
	// ForeignIdentity says the snapshot's disk holds another machine's
	// identity (a copy's snapshot holds its source's hostname, hosts file
	// and machine ID): a restore gives the instance its own again.
	ForeignIdentity bool `json:"foreign_identity,omitempty"`
	// TakenAs is the instance's name when the snapshot was taken: the
	// name in its disk's /etc/hostname and /etc/hosts and in its
	// checkpoint's UTS namespace. A move that renames the instance
	// carries it unchanged, so a restore gives the instance its new name
	// back (and keeps its machine ID: it is the same machine).
	TakenAs string `json:"taken_as,omitempty"`
}

// Key returns the snapshot's key, "INSTANCE/NAME".
func (s Snapshot) Key() string { return s.Instance + "/" + s.Name }

// CreateSnapshot stores a new snapshot record; ErrExists if the instance
// already has a snapshot of that name.
func (s *Store) CreateSnapshot(snap Snapshot) error {
	snap.Version = SnapshotVersion
	return s.db.Update(func(tx *bolt.Tx) error {
		return put(tx, bucketSnapshots, snap.Key(), &snap, true)
	})
}

// GetSnapshot returns one snapshot of an instance, or ErrNotFound.
func (s *Store) GetSnapshot(instance, name string) (Snapshot, error) {
	snap, err := get[Snapshot](s, bucketSnapshots, instance+"/"+name)
	if err == nil && snap.Version > SnapshotVersion {
		return Snapshot{}, fmt.Errorf("snapshot %s/%s: record version %d: %w", instance, name, snap.Version, ErrSchema)
	}
	return snap, err
}

// ListSnapshots returns an instance's snapshots, oldest first.
func (s *Store) ListSnapshots(instance string) ([]Snapshot, error) {
	var out []Snapshot
	prefix := []byte(instance + "/")
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSnapshots).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var rec Snapshot
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode snapshot %q: %w", k, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	// Oldest first; names break ties.
	slices.SortFunc(out, func(a, b Snapshot) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, err
}

// DeleteSnapshot removes one snapshot record.
func (s *Store) DeleteSnapshot(instance, name string) error {
	return del(s, bucketSnapshots, instance+"/"+name)
}
