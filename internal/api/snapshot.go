package api

import "time"

// Snapshot is a container snapshot as the API shows it: a read-only copy of
// the container's disk and, when Stateful, its memory and process state
// saved at the same frozen instant.
type Snapshot struct {
	Name     string    `json:"name"`
	Instance string    `json:"instance"`
	Created  time.Time `json:"created"`
	Stateful bool      `json:"stateful"`
	// Size is DiskBytes + MemoryBytes: the snapshot's files and its
	// checkpoint images.
	Size        uint64 `json:"size"`
	DiskBytes   uint64 `json:"disk_bytes"`
	MemoryBytes uint64 `json:"memory_bytes"`
	// FrozenMs is how long the container was frozen to take it (0 for a
	// stopped container).
	FrozenMs float64 `json:"frozen_ms"`
}

// SnapshotsPost is POST /1.0/instances/NAME/snapshots.
type SnapshotsPost struct {
	// Name of the new snapshot; empty picks the first free "snapN".
	Name string `json:"name"`
	// Stateful also saves the running container's memory and processes.
	Stateful bool `json:"stateful"`
}

// SnapshotRestorePost is POST /1.0/instances/NAME/snapshots/SNAP/restore.
type SnapshotRestorePost struct {
	// Stateful restores the processes too (the snapshot must hold them);
	// otherwise only the disk is rolled back.
	Stateful bool `json:"stateful"`
	// Force stops a running container first.
	Force bool `json:"force"`
}

// Snapshot operation progress metadata keys (while it runs and when done).
const (
	// MetaStage is the current step: "freeze", "dump", "store", "restore".
	MetaStage = "stage"
	// MetaBytes is the bytes of memory image written or read so far.
	MetaBytes = "bytes"
	// MetaRate is MetaBytes per second since the step began.
	MetaRate = "rate_bytes_per_s"
	// MetaFrozenMs is how long the container was frozen.
	MetaFrozenMs = "frozen_ms"
	// MetaSnapshot names the snapshot created.
	MetaSnapshot = "snapshot"
)
