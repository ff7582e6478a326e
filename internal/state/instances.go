package state

import (
	"net/netip"
	"time"
)

// InstanceVersion is the format version of Instance records.
const InstanceVersion = 2

// OS names the distribution inside a container or image (from os-release).
type OS struct {
	ID         string `json:"id,omitempty"`
	Name       string `json:"name,omitempty"`
	VersionID  string `json:"version_id,omitempty"`
	PrettyName string `json:"pretty_name,omitempty"`
}

// Exit records how a container's init ended.
type Exit struct {
	Status int       `json:"status"`
	Signal string    `json:"signal,omitempty"`
	Time   time.Time `json:"time"`
}

// InstanceState is an instance's durable lifecycle state: what it was
// last committed to be. The live state (is a process up) is the runtime's;
// a daemon reconciles the two at start.
type InstanceState string

// Instance states.
const (
	// StateCreating: the record exists but its volume is not complete yet;
	// a daemon that finds one at start undoes the create.
	StateCreating InstanceState = "creating"
	// StateStopped: no processes; the instance may start.
	StateStopped InstanceState = "stopped"
	// StateRunning: vessel started it and has not stopped it. At daemon
	// start it tells a crash (the processes are gone: shown stopped) from
	// a container that is simply off.
	StateRunning InstanceState = "running"
)

// Instance types.
const (
	// TypeContainer is a system container (the type of a record without
	// one).
	TypeContainer = "container"
	// TypeVM is a QEMU virtual machine.
	TypeVM = "virtual-machine"
)

// Instance is an instance's durable record.
type Instance struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// Type is TypeContainer (also when empty) or TypeVM.
	Type string `json:"type,omitempty"`
	// Image is the fingerprint of the image the container was made from.
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	// Config holds the user's configuration keys (limits.* and so on).
	Config map[string]string `json:"config,omitempty"`
	// Init, Env, Cwd and StopSignal come from the image at creation.
	Init       []string `json:"init"`
	Env        []string `json:"env,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	StopSignal string   `json:"stop_signal"`
	OS         OS       `json:"os"`
	// Address is the container's IPv4 address on the bridge, kept for its
	// whole life (also across restarts and migrations).
	Address netip.Addr `json:"address"`
	// State is the lifecycle state last committed (see InstanceState).
	State InstanceState `json:"state"`
	// RollingBack names the snapshot whose disk is replacing the
	// container's: set before the old disk goes, cleared once the new one
	// is in place, so a daemon that crashed in between finishes the job.
	RollingBack string `json:"rolling_back,omitempty"`
	// IDMap is the host id range of an unprivileged container's user
	// namespace, allocated at its first start and kept for its life (it
	// moves with it). Nil for a privileged container.
	IDMap *IDMap `json:"idmap,omitempty"`
	// NewIdentity marks a VM copy whose guest has not booted yet: its
	// next boot empties the guest's machine ID (vm.Boot.NewMachineID), as
	// a container's copy has it emptied on its disk. Cleared by the start.
	NewIdentity bool `json:"new_identity,omitempty"`
	// LastStart and LastExit describe the latest run.
	LastStart time.Time `json:"last_start,omitzero"`
	LastExit  *Exit     `json:"last_exit,omitempty"`
}

// IDMap maps an unprivileged container's ids 0..Size-1 to the host's
// UID.. and GID...
type IDMap struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size uint32 `json:"size"`
}

// IsVM says the instance is a virtual machine.
func (i Instance) IsVM() bool { return i.Type == TypeVM }

// Running says the instance's committed state is StateRunning.
func (i Instance) Running() bool { return i.State == StateRunning }

// CreateInstance stores a new instance; ErrExists if the name is taken.
func (s *Store) CreateInstance(inst Instance) error {
	return s.Update(func(tx *Tx) error { return tx.CreateInstance(inst) })
}

// GetInstance returns the instance called name, or ErrNotFound.
func (s *Store) GetInstance(name string) (Instance, error) {
	return get[Instance](s, bucketInstances, name)
}

// ListInstances returns every instance, sorted by name.
func (s *Store) ListInstances() ([]Instance, error) {
	recs, err := list[Instance](s, bucketInstances)
	return sortedBy(recs, func(i Instance) string { return i.Name }), err
}

// UpdateInstance applies fn to the stored record atomically and returns the
// result. An error from fn aborts the update.
func (s *Store) UpdateInstance(name string, fn func(*Instance) error) (Instance, error) {
	return update(s, bucketInstances, name, fn)
}

// DeleteInstance removes an instance's record.
func (s *Store) DeleteInstance(name string) error {
	return s.Update(func(tx *Tx) error { return tx.DeleteInstance(name) })
}

// UsedAddresses returns every address held by an instance.
func (s *Store) UsedAddresses() ([]netip.Addr, error) {
	var out []netip.Addr
	err := s.View(func(tx *Tx) error {
		var err error
		out, err = tx.UsedAddresses()
		return err
	})
	return out, err
}
