package cgroups

import (
	"fmt"
	"math"

	occgroups "github.com/opencontainers/cgroups"
)

// CPU weights are on cgroup v2's scale: 1 to 10000, default 100. On v1 they
// become cpu.shares (2 to 262144, default 1024) linearly, as systemd
// converts CPUWeight= to cpu.shares:
//
//	shares = round(weight * 1024 / 100)   clamped to [2, 262144]
//	weight = round(shares * 100 / 1024)   clamped to [1, 10000]
//
// The conversion keeps ratios: a weight 10x another's gets 10x the shares
// (1000 -> 10240, the XenServer control slice's CPUShares). runc's own
// conversion (cgroups.ConvertCPUSharesToCgroupV2Value) is a quadratic fit
// that maps 1024 to 100 but 10240 to 640, bending ratios; vessel never
// hands shares to runc, so only this one applies.
const (
	MinCPUWeight     = 1
	MaxCPUWeight     = 10000
	DefaultCPUWeight = 100

	minCPUShares     = 2
	maxCPUShares     = 262144
	defaultCPUShares = 1024
)

// Disk weights are on BFQ's scale, the same on v1 (blkio.bfq.weight) and v2
// (io.bfq.weight): 1 to 1000, default 100. Where BFQ is missing on v2 the
// same number goes to io.weight (iocost, scale 1 to 10000, default 100), so
// ratios and the default stay the same.
const (
	MinDiskWeight     = 1
	MaxDiskWeight     = 1000
	DefaultDiskWeight = 100
)

// CPUPeriod is the CFS period vessel uses for CPU quotas, in microseconds.
const CPUPeriod = 100000

// CPUWeightToShares converts a v2 CPU weight to v1 cpu.shares (see above).
func CPUWeightToShares(weight uint64) uint64 {
	s := uint64(math.Round(float64(weight) * defaultCPUShares / DefaultCPUWeight))
	return min(max(s, minCPUShares), maxCPUShares)
}

// CPUSharesToWeight converts v1 cpu.shares to a v2 CPU weight (see above).
func CPUSharesToWeight(shares uint64) uint64 {
	w := uint64(math.Round(float64(shares) * DefaultCPUWeight / defaultCPUShares))
	return min(max(w, MinCPUWeight), MaxCPUWeight)
}

// Resources are the limits of one cgroup in vessel's units, the same on
// v1 and v2. Set writes all of them: a zero field means "no limit" (or the
// default weight), so applying a Resources value also removes limits that
// were set before.
type Resources struct {
	// CPUQuota is the CPU time the cgroup may use per second of wall time,
	// in cores (1.5 = one and a half CPUs); 0 means unlimited.
	CPUQuota float64
	// CPUWeight is the cgroup's share of contended CPU among its siblings,
	// 1..10000 (0 means the default, 100).
	CPUWeight uint64
	// MemoryMax is the memory limit in bytes; 0 means unlimited.
	MemoryMax int64
	// PidsMax is the limit on tasks (processes and threads); 0 means
	// unlimited.
	PidsMax int64
	// Devices are the per-device I/O limits: every device the cgroup's I/O
	// lands on should be listed, with zero rates where there is no limit,
	// so that limits set before are removed.
	Devices []DeviceLimit
	// DiskWeight is the cgroup's share of contended disk time among its
	// siblings, 1..1000 (0 means the default, 100). It needs a
	// proportional scheduler on the device: BFQ, or iocost on v2.
	DiskWeight uint16
}

// DeviceLimit is the I/O limit of one whole-disk block device.
type DeviceLimit struct {
	// Major and Minor number the device ("MAJ:MIN" in sysfs).
	Major, Minor int64
	// ReadBPS and WriteBPS are bytes per second; ReadIOPS and WriteIOPS
	// operations per second. 0 means unlimited.
	ReadBPS, WriteBPS, ReadIOPS, WriteIOPS uint64
}

// ParseDevice parses a "MAJ:MIN" device number.
func ParseDevice(dev string) (major, minor int64, err error) {
	if _, err := fmt.Sscanf(dev, "%d:%d", &major, &minor); err != nil {
		return 0, 0, fmt.Errorf("bad device number %q: %w", dev, err)
	}
	return major, minor, nil
}

// Limited reports whether any of the device's rates is limited.
func (d DeviceLimit) Limited() bool {
	return d.ReadBPS != 0 || d.WriteBPS != 0 || d.ReadIOPS != 0 || d.WriteIOPS != 0
}

// validate checks the ranges the kernel would reject less clearly.
func (r Resources) validate() error {
	switch {
	case r.CPUQuota < 0 || math.IsNaN(r.CPUQuota) || math.IsInf(r.CPUQuota, 0):
		return fmt.Errorf("%w: CPU quota %v", ErrInvalidResources, r.CPUQuota)
	case r.CPUQuota > 0 && r.CPUQuota*CPUPeriod < 1000:
		return fmt.Errorf("%w: CPU quota %v is below the kernel's 1 ms per period", ErrInvalidResources, r.CPUQuota)
	case r.CPUWeight > MaxCPUWeight:
		return fmt.Errorf("%w: CPU weight %d (want %d..%d)", ErrInvalidResources, r.CPUWeight, MinCPUWeight, MaxCPUWeight)
	case r.DiskWeight > MaxDiskWeight:
		return fmt.Errorf("%w: disk weight %d (want %d..%d)", ErrInvalidResources, r.DiskWeight, MinDiskWeight, MaxDiskWeight)
	case r.MemoryMax < 0 || r.PidsMax < 0:
		return fmt.Errorf("%w: negative memory or pids limit", ErrInvalidResources)
	}
	return nil
}

// cpuWeight is the effective CPU weight (the default when unset).
func (r Resources) cpuWeight() uint64 {
	if r.CPUWeight == 0 {
		return DefaultCPUWeight
	}
	return r.CPUWeight
}

// diskWeight is the effective disk weight (the default when unset).
func (r Resources) diskWeight() uint16 {
	if r.DiskWeight == 0 {
		return DefaultDiskWeight
	}
	return r.DiskWeight
}

// toOCI converts r to runc's cgroup resources for the given layout: CPU,
// memory and pids for both, and on v1 the blkio throttles. The disk weight
// and the v2 io.max lines are written by setIO (see there for why).
// "Unlimited" is -1 for runc's memory, quota and pids fields.
func (r Resources) toOCI(v Version) *occgroups.Resources {
	out := &occgroups.Resources{
		// Device rules belong to runc (the container's spec); never
		// replace them (on v2 an empty rule set would deny every device).
		SkipDevices: true,
		CpuPeriod:   CPUPeriod,
		CpuQuota:    -1,
		Memory:      -1,
	}
	if r.CPUQuota > 0 {
		out.CpuQuota = int64(math.Round(r.CPUQuota * CPUPeriod))
	}
	if v == V2 {
		out.CpuWeight = r.cpuWeight()
	} else {
		out.CpuShares = CPUWeightToShares(r.cpuWeight())
	}
	if r.MemoryMax > 0 {
		out.Memory = r.MemoryMax
	}
	pids := int64(-1)
	if r.PidsMax > 0 {
		pids = r.PidsMax
	}
	out.PidsLimit = &pids
	if v == V1 {
		for _, d := range r.Devices {
			// On v1 a rate of 0 removes the device's rule.
			out.BlkioThrottleReadBpsDevice = append(out.BlkioThrottleReadBpsDevice, occgroups.NewThrottleDevice(d.Major, d.Minor, d.ReadBPS))
			out.BlkioThrottleWriteBpsDevice = append(out.BlkioThrottleWriteBpsDevice, occgroups.NewThrottleDevice(d.Major, d.Minor, d.WriteBPS))
			out.BlkioThrottleReadIOPSDevice = append(out.BlkioThrottleReadIOPSDevice, occgroups.NewThrottleDevice(d.Major, d.Minor, d.ReadIOPS))
			out.BlkioThrottleWriteIOPSDevice = append(out.BlkioThrottleWriteIOPSDevice, occgroups.NewThrottleDevice(d.Major, d.Minor, d.WriteIOPS))
		}
	}
	return out
}
