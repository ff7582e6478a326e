package api

// Server is GET /1.0: the daemon and its host.
type Server struct {
	APIVersion string `json:"api_version"`
	// Auth is how the server sees the caller: AuthLocal, AuthClient,
	// AuthPeer or AuthUntrusted (then Host is empty).
	Auth string `json:"auth"`
	// Fingerprint is the server's certificate fingerprint.
	Fingerprint string `json:"fingerprint"`
	// Host is the daemon's host name (a remote's identity in a cluster).
	Host HostInfo `json:"host,omitzero"`
}

// Values of Server.Auth: how the server sees the caller.
const (
	// AuthLocal came over the root-only unix socket: everything.
	AuthLocal = "local"
	// AuthClient presented a trusted client certificate: everything.
	AuthClient = "client"
	// AuthPeer presented a trusted peer host's certificate: migration.
	AuthPeer = "peer"
	// AuthUntrusted presented an unknown certificate or none: the public
	// endpoints only.
	AuthUntrusted = "untrusted"
)

// HostInfo is the host inventory: what runs where (the OpenVZ statistics
// idea of host and container distributions).
type HostInfo struct {
	Hostname      string `json:"hostname"`
	VesselVersion string `json:"vessel_version"`
	OS            OS     `json:"os"`
	Kernel        string `json:"kernel"`
	Architecture  string `json:"architecture"`
	CPUs          int    `json:"cpus"`
	MemoryTotal   uint64 `json:"memory_total"`
	CgroupVersion string `json:"cgroup_version"`
	StorageDriver string `json:"storage_driver"`
	RuncVersion   string `json:"runc_version"`
	CRIUVersion   string `json:"criu_version"`
	CRIUCheck     string `json:"criu_check"`
	Instances     int    `json:"instances"`
	InstancesUp   int    `json:"instances_running"`
	// Control is the control plane's cgroup and CPU weight.
	Control ControlPlane `json:"control"`
	// StorageDevices are the disks under the storage pool and their I/O
	// schedulers.
	StorageDevices []BlockDevice `json:"storage_devices,omitempty"`
	// Warnings are what the daemon found wrong at its start and cleaned
	// (e.g. a volume without an instance record), one sentence each.
	Warnings []string `json:"warnings,omitempty"`
	// DefaultLimits are the limits.* values every container runs with
	// unless its configuration sets them ("unlimited": no limit).
	DefaultLimits map[string]string `json:"default_limits,omitempty"`
	// VMAccel is the accelerator VMs run with ("kvm" or "tcg");
	// VMAccelReason says why not KVM.
	VMAccel       string `json:"vm_accel,omitempty"`
	VMAccelReason string `json:"vm_accel_reason,omitempty"`
}

// OS names a distribution (from os-release).
type OS struct {
	ID         string `json:"id,omitempty"`
	Name       string `json:"name,omitempty"`
	VersionID  string `json:"version_id,omitempty"`
	PrettyName string `json:"pretty_name,omitempty"`
}

// StoragePool is GET /1.0/storage: the storage pool and its usage.
type StoragePool struct {
	Driver       string         `json:"driver"`
	Path         string         `json:"path"`
	Source       string         `json:"source,omitempty"`
	InstantClone bool           `json:"instant_clone"`
	Total        uint64         `json:"total"`
	Used         uint64         `json:"used"`
	Free         uint64         `json:"free"`
	Devices      []string       `json:"devices,omitempty"`
	Volumes      map[string]int `json:"volumes"`
}
