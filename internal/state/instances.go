package state

import (
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"
)

// InstanceVersion is the format version of Instance records.
const InstanceVersion = 1

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

// Instance is a container's durable record.
type Instance struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
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
	// Running says vessel started the container and has not stopped it;
	// at daemon start it tells a crash (shown as stopped) from a container
	// that is simply off.
	Running bool `json:"running"`
	// LastStart and LastExit describe the latest run.
	LastStart time.Time `json:"last_start,omitzero"`
	LastExit  *Exit     `json:"last_exit,omitempty"`
}

// CreateInstance stores a new instance; ErrExists if the name is taken.
func (s *Store) CreateInstance(inst Instance) error {
	inst.Version = InstanceVersion
	return s.db.Update(func(tx *bolt.Tx) error {
		return put(tx, bucketInstances, inst.Name, &inst, true)
	})
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
	return del(s, bucketInstances, name)
}

// UsedAddresses returns every address held by an instance.
func (s *Store) UsedAddresses() ([]netip.Addr, error) {
	insts, err := s.ListInstances()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(insts))
	for _, i := range insts {
		if i.Address.IsValid() {
			out = append(out, i.Address)
		}
	}
	return out, nil
}
