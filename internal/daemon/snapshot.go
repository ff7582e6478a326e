package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// Snapshots (vocabulary):
//
//   - Snapshot: a read-only copy of a container's disk (a snapshot volume,
//     storage "snapshots/NAME/SNAP") and its record in the state store.
//   - Stateful snapshot: a snapshot with a checkpoint: CRIU's images of the
//     container's processes and memory (a checkpoint volume,
//     "checkpoints/NAME/SNAP"), taken while the container is frozen at the
//     same instant as the disk copy, so the two match.
//   - Frozen time: how long the container's cgroup was frozen for the
//     snapshot. A disk-only snapshot on btrfs freezes it for one ioctl.

func snapshotVolume(name, snap string) storage.Volume {
	return storage.Volume{Type: storage.VolumeSnapshot, Name: name + "/" + snap}
}

func checkpointVolume(name, snap string) storage.Volume {
	return storage.Volume{Type: storage.VolumeCheckpoint, Name: name + "/" + snap}
}

func snapshotResources(name, snap string) map[string][]string {
	r := instanceResources(name)
	r["snapshots"] = []string{"/" + api.Version + "/instances/" + name + "/snapshots/" + snap}
	return r
}

func renderSnapshot(s state.Snapshot) api.Snapshot {
	return api.Snapshot{
		Name:        s.Name,
		Instance:    s.Instance,
		Created:     s.Created,
		Stateful:    s.Stateful,
		Size:        s.DiskBytes + s.MemoryBytes,
		DiskBytes:   s.DiskBytes,
		MemoryBytes: s.MemoryBytes,
		FrozenMs:    s.FrozenMs,
	}
}

// getSnapshotRecord returns a snapshot's record, with clear errors for an
// unknown instance or snapshot.
func (d *Daemon) getSnapshotRecord(name, snap string) (state.Snapshot, error) {
	if _, err := d.instance(name); err != nil {
		return state.Snapshot{}, err
	}
	s, err := d.state.GetSnapshot(name, snap)
	if errors.Is(err, state.ErrNotFound) {
		return s, errorf(ErrNotFound, "snapshot %q of instance %q not found", snap, name)
	}
	return s, err
}

// ListSnapshots returns an instance's snapshots, oldest first.
func (d *Daemon) ListSnapshots(ctx context.Context, name string) ([]api.Snapshot, error) {
	if _, err := d.instance(name); err != nil {
		return nil, err
	}
	recs, err := d.state.ListSnapshots(name)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, renderSnapshot(r))
	}
	return out, nil
}

// GetSnapshot returns one snapshot.
func (d *Daemon) GetSnapshot(ctx context.Context, name, snap string) (api.Snapshot, error) {
	s, err := d.getSnapshotRecord(name, snap)
	if err != nil {
		return api.Snapshot{}, err
	}
	return renderSnapshot(s), nil
}

// nextSnapshotName returns the first free name snap0, snap1, ...
func (d *Daemon) nextSnapshotName(name string) (string, error) {
	recs, err := d.state.ListSnapshots(name)
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, r := range recs {
		used[r.Name] = true
	}
	for i := 0; ; i++ {
		if n := fmt.Sprintf("snap%d", i); !used[n] {
			return n, nil
		}
	}
}

// splitSnapshotRef splits "NAME/SNAP" (or "NAME") into its parts.
func splitSnapshotRef(ref string) (name, snap string, err error) {
	name, snap, found := strings.Cut(ref, "/")
	if err := ValidateName("instance", name); err != nil {
		return "", "", err
	}
	if found {
		if err := ValidateName("snapshot", snap); err != nil {
			return "", "", err
		}
	}
	return name, snap, nil
}
