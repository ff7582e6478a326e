package api

import "time"

// Instance statuses.
const (
	StatusRunning  = "Running"
	StatusStopped  = "Stopped"
	StatusFrozen   = "Frozen"
	StatusStarting = "Starting"
	StatusStopping = "Stopping"
	StatusError    = "Error"
)

// Instance is a container as the API shows it.
type Instance struct {
	Name string `json:"name"`
	// Type is InstanceContainer or InstanceVM.
	Type      string            `json:"type"`
	Status    string            `json:"status"`
	Image     string            `json:"image"`
	Created   time.Time         `json:"created"`
	LastStart time.Time         `json:"last_start,omitzero"`
	Config    map[string]string `json:"config"`
	// Defaults are the host's default limits that apply to this instance:
	// those of the keys Config does not set. It runs with Config and
	// Defaults together.
	Defaults   map[string]string `json:"defaults,omitempty"`
	OS         OS                `json:"os"`
	IPv4       string            `json:"ipv4,omitempty"`
	PID        int               `json:"pid,omitempty"`
	Location   string            `json:"location,omitempty"`
	StopSignal string            `json:"stop_signal,omitempty"`
	LastExit   *InstanceExit     `json:"last_exit,omitempty"`
	// AgentReady is when a running VM's guest agent answered since the
	// guest last booted (zero: not yet, or a container).
	AgentReady time.Time `json:"agent_ready,omitzero"`
	// Privileged says the container runs without a user namespace of its
	// own (security.privileged=true): its root is the host's root.
	Privileged bool `json:"privileged"`
	// IDMap is an unprivileged container's host id range, once it has
	// one (its first start): "UID:GID+SIZE".
	IDMap string `json:"idmap,omitempty"`
	// State is live usage; filled for single-instance GETs.
	State *InstanceState `json:"state,omitempty"`
	// Migration is a migration of the instance in flight on this host (or
	// one a crash or a lost connection left to settle); filled for
	// single-instance GETs.
	Migration *InstanceMigration `json:"migration,omitempty"`
}

// InstanceMigration describes a migration in flight, from its journal.
type InstanceMigration struct {
	// Role is "source" or "target".
	Role string `json:"role"`
	// Phase is "transfer" (the target has not been told to start the
	// container) or "restoring" (it has).
	Phase string `json:"phase"`
	// Peer names the other host (its fingerprint on the source).
	Peer    string    `json:"peer"`
	Started time.Time `json:"started"`
}

// InstanceExit says how the container's init last ended.
type InstanceExit struct {
	Status int       `json:"status"`
	Signal string    `json:"signal,omitempty"`
	Time   time.Time `json:"time"`
}

// InstanceState is a running container's live usage, read from its cgroups.
type InstanceState struct {
	CPUUsageNS  uint64 `json:"cpu_usage_ns"`
	MemoryUsage uint64 `json:"memory_usage"`
	MemoryLimit uint64 `json:"memory_limit,omitempty"`
	Processes   uint64 `json:"processes"`
	Cgroup      string `json:"cgroup"`
	// OOMKills counts processes the kernel killed because the container
	// reached limits.memory.
	OOMKills uint64 `json:"oom_kills"`
	// IO is the container's block I/O per device, with the devices'
	// I/O schedulers.
	IO []InstanceIO `json:"io,omitempty"`
}

// InstanceSource says where a new container's root filesystem comes from.
type InstanceSource struct {
	// Type is "image" (the default) or "copy".
	Type string `json:"type"`
	// Image is an alias, a fingerprint or a unique fingerprint prefix.
	Image string `json:"image,omitempty"`
	// Source, for "copy", is "NAME/SNAP" (a snapshot) or "NAME" (a
	// stopped container).
	Source string `json:"source,omitempty"`
	// InstanceOnly, for a "copy" of an instance, leaves its snapshots
	// behind; by default the copy gets them too. A copy of a snapshot
	// never has snapshots.
	InstanceOnly bool `json:"instance_only,omitempty"`
}

// InstancesPost is POST /1.0/instances.
type InstancesPost struct {
	Name   string            `json:"name"`
	Source InstanceSource    `json:"source"`
	Config map[string]string `json:"config,omitempty"`
	// Start the container once created (launch).
	Start bool `json:"start"`
	// Type is InstanceContainer (also when empty) or InstanceVM.
	Type string `json:"type,omitempty"`
}

// Instance types.
const (
	InstanceContainer = "container"
	InstanceVM        = "virtual-machine"
)

// Instance state actions.
const (
	ActionStart   = "start"
	ActionStop    = "stop"
	ActionRestart = "restart"
)

// InstanceStatePut is PUT /1.0/instances/NAME/state.
type InstanceStatePut struct {
	Action string `json:"action"`
	// Timeout is how long a graceful stop may take, in seconds, before the
	// container is killed; 0 means the default (30 s). At most 24 h: a
	// negative or larger value is refused with 400.
	Timeout int `json:"timeout"`
	// Force kills at once instead of asking init to shut down.
	Force bool `json:"force"`
}

// InstanceMigratePost is POST /1.0/instances/NAME/migrate: move (or copy)
// the instance to a peer host.
type InstanceMigratePost struct {
	// TargetFingerprint identifies the target host (one of this host's
	// peers) by its certificate fingerprint.
	TargetFingerprint string `json:"target_fingerprint"`
	// Name on the target (default: the same).
	Name string `json:"name,omitempty"`
	// Live keeps a running container running through the move (CRIU);
	// otherwise a running container is stopped, moved and started.
	Live bool `json:"live"`
	// Memory is "auto" (default: copy for a container with little
	// memory, lazy otherwise), "lazy" (post-copy) or "copy" for a live move.
	Memory string `json:"memory,omitempty"`
	// Copy leaves the source instance in place (vessel copy); the copy gets
	// a new address.
	Copy bool `json:"copy"`
	// InstanceOnly leaves the snapshots behind (a move then deletes them
	// with the source instance); by default they move (or are copied)
	// too.
	InstanceOnly bool `json:"instance_only"`
}
