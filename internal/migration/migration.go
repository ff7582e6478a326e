// Package migration is the wire side of moving a container between hosts:
// one connection per migration and its control messages. The per-phase
// timing report and the memory modes are the API's (api.MigrationTiming,
// api.MemoryAuto...).
//
// Vocabulary:
//
//   - Session: the one connection between the source and the target host:
//     an HTTPS request upgraded to a raw TLS stream (mutual certificates,
//     the target admits only trusted peers), multiplexed with yamux. The
//     first stream carries control messages; every bulk transfer (a disk
//     send stream, checkpoint images, the lazy-page tunnel) gets its own
//     stream, so control never waits behind data and nothing reconnects
//     between phases. A post-copy move's pages have a connection of their
//     own, the page link (pagelink.go).
//   - Pre-copy iteration: one disk transfer while the container runs: a full
//     send first, then the changes since the previous iteration. The target
//     forces each one to disk and acknowledges it before the next (two-way
//     channel: nobody sleeps waiting for a peer's fsync).
//   - Frozen time: from the moment the container's cgroup is frozen on the
//     source until its processes run again on the target.
//   - Post-copy (lazy) memory: the target resumes before memory has moved;
//     pages are pulled from the source's CRIU page server on first touch and
//     in the background, through the session.
package migration

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Version is the migration protocol's version. A target refuses a Hello
// of any other version (compared exactly: both hosts must speak the same
// protocol; there is no negotiation).
const Version = 9

// UpgradeProtocol names the HTTP upgrade to a migration session.
const UpgradeProtocol = "vessel-migration/1"

// Errors.
var (
	// ErrProtocol says the peer sent something out of order or malformed.
	ErrProtocol = errors.New("migration protocol error")
	// ErrRemote wraps an error the peer reported.
	ErrRemote = errors.New("peer reported")
)

// Instance is what the target needs to recreate a container.
type Instance struct {
	Name       string            `json:"name"`
	Image      string            `json:"image"`
	Created    time.Time         `json:"created"`
	Config     map[string]string `json:"config,omitempty"`
	Init       []string          `json:"init"`
	Env        []string          `json:"env,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	StopSignal string            `json:"stop_signal"`
	OS         OS                `json:"os"`
	Address    netip.Addr        `json:"address"`
	// IDMap is an unprivileged container's host id range: its checkpoint
	// images are in these ids, so the target keeps it (or refuses).
	IDMap *IDMap `json:"idmap,omitempty"`
	// Type is the instance's type (state.TypeVM for a virtual machine;
	// empty: a container).
	Type string `json:"type,omitempty"`
	// NewIdentity is state.Instance's: a VM whose next boot empties the
	// guest's machine ID (a copy not booted yet, or one whose snapshot
	// from its source was restored) keeps that through a move.
	NewIdentity bool `json:"new_identity,omitempty"`
}

// IDMap is a container's user namespace map (state.IDMap).
type IDMap struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size uint32 `json:"size"`
}

// OS names the container's distribution.
type OS struct {
	ID         string `json:"id,omitempty"`
	Name       string `json:"name,omitempty"`
	VersionID  string `json:"version_id,omitempty"`
	PrettyName string `json:"pretty_name,omitempty"`
}

// Hello opens a session (source -> target).
type Hello struct {
	Version int    `json:"version"`
	Source  string `json:"source"`
	// Instance is the instance's record, under the name it takes on the
	// target.
	Instance Instance `json:"instance"`
	// SourceName is its name on the source: another than Instance.Name
	// in a move that renames (version 8).
	SourceName string `json:"source_name"`
	// Live keeps the container running through the move.
	Live bool `json:"live"`
	// Memory is api.MemoryLazy, api.MemoryCopy or api.MemoryPrecopy
	// (live only).
	Memory string `json:"memory,omitempty"`
	// Start the container on the target after a cold move.
	Start bool `json:"start"`
	// Snapshots is how many snapshots will be sent before the disk.
	Snapshots int `json:"snapshots"`
	// KeepAddress asks the target to keep the container's address (a move);
	// a copy gets a new one.
	KeepAddress bool `json:"keep_address"`
	// TransferFormat is the format of the source's volume transfers
	// (storage.Info.TransferFormat); the target must receive that format.
	TransferFormat string `json:"transfer_format"`
	// PageToken (a post-copy move) opens the page link the source dials
	// beside the session (see PagesProtocol).
	PageToken string `json:"page_token,omitempty"`
	// VMDiskSize is a VM's disk size in bytes: the target makes an empty
	// disk of this size for the mirror (see StreamVMDisk).
	VMDiskSize int64 `json:"vm_disk_size,omitempty"`
}

// Message is one control message; Type says which fields matter.
type Message struct {
	Type string `json:"type"`
	// Error text (Type "error").
	Error string `json:"error,omitempty"`
	// Disk transfer (Type "disk" from the source: a stream follows; "disk-synced"
	// from the target once it is on its disk).
	Iteration int   `json:"iteration,omitempty"`
	Bytes     int64 `json:"bytes,omitempty"`
	// Final marks the last disk transfer (taken while frozen or stopped).
	Final bool `json:"final,omitempty"`
	// Address the target gives the container (Type "accepted").
	Address netip.Addr `json:"address,omitzero"`
	// Restore timing from the target (Type "resumed"), in seconds:
	// the restore until this message, and how long before it the tasks
	// resumed (the target's bookkeeping after CRIU's answer: the runtime's
	// state, the journal), both on the target's clock.
	RestoreSeconds float64 `json:"restore_seconds,omitempty"`
	ResumedSeconds float64 `json:"resumed_seconds,omitempty"`
	// Memory is the memory mode the source switched to (Type
	// "memory-mode": --memory=auto dropped its pre-copy passes).
	Memory string `json:"memory,omitempty"`
	// Pages lists the page files streamed during the dump (Type "images"):
	// the target has them all before it acknowledges.
	Pages []string `json:"pages,omitempty"`
	// Record is a snapshot's record (Type "snapshot"): its disk follows
	// on a disk stream, then, if Stateful, its checkpoint on an images
	// stream.
	Record *SnapshotRecord `json:"record,omitempty"`
}

// SnapshotRecord describes one of the instance's snapshots.
type SnapshotRecord struct {
	Name        string            `json:"name"`
	Created     time.Time         `json:"created"`
	Stateful    bool              `json:"stateful"`
	DiskBytes   uint64            `json:"disk_bytes"`
	MemoryBytes uint64            `json:"memory_bytes"`
	FrozenMs    float64           `json:"frozen_ms"`
	Config      map[string]string `json:"config,omitempty"`
	OS          OS                `json:"os"`
	// ForeignIdentity is state.Snapshot's (a copy's snapshots, and the
	// snapshots of a copy that moves, hold another machine's identity).
	ForeignIdentity bool `json:"foreign_identity,omitempty"`
	// TakenAs is state.Snapshot's (the instance's name when it was
	// taken); version 8.
	TakenAs string `json:"taken_as,omitempty"`
}

// Message types, in protocol order.
const (
	MsgAccepted   = "accepted"     // target: Hello is acceptable, name and address reserved
	MsgDisk       = "disk"         // source: a disk stream follows on a new stream
	MsgDiskSynced = "disk-synced"  // target: that stream is received and on disk
	MsgMemoryPass = "memory-pass"  // source: a pre-copy memory pass (Iteration) follows on an images stream
	MsgMemoryOK   = "memory-ok"    // target: that pass is stored (or the mode switched)
	MsgMemoryMode = "memory-mode"  // source: drop the passes, restore in mode Memory (lazy)
	MsgImages     = "images"       // source: checkpoint images follow on a new stream
	MsgImagesDone = "images-done"  // target: images received
	MsgSnapshot   = "snapshot"     // source: a snapshot (record, disk, checkpoint) follows
	MsgSnapshotOK = "snapshot-ok"  // target: that snapshot is stored
	MsgStart      = "start"        // source: make the container run (restore or start)
	MsgResumed    = "resumed"      // target: the container runs on the target
	MsgPagesDone  = "pages-done"   // target: post-copy finished, every page arrived
	MsgLogs       = "logs"         // source: the console log so far follows on a new stream
	MsgCommit     = "commit"       // source: the source copy is gone; the move is done
	MsgVMDiskDone = "vm-disk-done" // source: a VM's disk mirror completed (after "start"): the target's disk is whole
	MsgError      = "error"        // either: abort, with a reason
)

// Expect checks a received message's type; an error message from the peer
// becomes an error wrapping ErrRemote.
func Expect(m Message, want string) error {
	if m.Type == MsgError {
		return fmt.Errorf("%w: %s", ErrRemote, m.Error)
	}
	if m.Type != want {
		return fmt.Errorf("%w: got %q, want %q", ErrProtocol, m.Type, want)
	}
	return nil
}

// Seconds converts a duration for the report (millisecond precision).
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Microsecond)) / float64(time.Second)
}
