package api

// InstancePatch is PATCH /1.0/instances/NAME: configuration keys to set; a
// key with an empty value is removed. The whole resulting configuration is
// validated and, for a running container, applied to it before it is
// saved: nothing is half-applied.
type InstancePatch struct {
	Config map[string]string `json:"config"`
}

// InstanceIO is a container's block I/O on one device, from its cgroup.
type InstanceIO struct {
	// Device is "MAJ:MIN"; Name the kernel's name ("loop3", "vda").
	Device     string `json:"device"`
	Name       string `json:"name,omitempty"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
	ReadOps    uint64 `json:"read_ops"`
	WriteOps   uint64 `json:"write_ops"`
	// Scheduler is the device's active I/O scheduler.
	Scheduler string `json:"scheduler,omitempty"`
}

// BlockDevice is a whole-disk device backing the storage pool: the devices
// disk limits are applied to.
type BlockDevice struct {
	Device string `json:"device"`
	Name   string `json:"name,omitempty"`
	// Scheduler is the device's active I/O scheduler. Disk weights
	// (limits.disk.weight) are enforced only by "bfq" (or iocost on v2).
	Scheduler string `json:"scheduler,omitempty"`
}

// ControlPlane describes where vesseld runs: its own cgroup beside the
// containers', with a CPU weight (v2 scale) against theirs.
type ControlPlane struct {
	// Cgroup is vesseld's cgroup: its control cgroup, or where it was
	// started (e.g. vesseld.service in vessel-control.slice).
	Cgroup string `json:"cgroup,omitempty"`
	// CPUWeight is the control cgroup's CPU weight, ContainersCPUWeight
	// that of the containers' parent. When vesseld stays where it was
	// started they are the weights of the two sibling cgroups that hold
	// each (under systemd vessel-control.slice and
	// vessel-instances.service, both in vessel.slice).
	CPUWeight           uint64 `json:"cpu_weight,omitempty"`
	ContainersCgroup    string `json:"containers_cgroup"`
	ContainersCPUWeight uint64 `json:"containers_cpu_weight,omitempty"`
}
