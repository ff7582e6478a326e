// Package cgroups manages the control groups vessel puts containers, their
// shims and its own control plane in.
//
// Vocabulary:
//
//   - Path: a cgroup's path below the hierarchy root, the same in every
//     hierarchy, e.g. "/vessel/web1". On cgroup v1 a cgroup exists once per
//     mounted controller (cpu, memory, blkio, ...); on v2 once in the single
//     unified tree. Callers never see the difference: New picks the backend
//     from the host.
//   - Parent: the cgroup every container cgroup lives under ("/vessel" by
//     default, configurable so several daemons can share a host).
//   - Control cgroup: where vesseld itself runs, beside the parent
//     ("/vessel-control"), with a higher CPU weight.
//   - Resources: a cgroup's limits in vessel's units (cores, bytes, a v2
//     CPU weight), converted here to each layout's files (see
//     resources.go for the shares <-> weight formula).
//
// The v1 and v2 backends are the ones runc itself uses
// (github.com/opencontainers/cgroups); this package is the small interface
// vessel needs on top of them.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// Version is the cgroup hierarchy layout of the host.
type Version int

// Host cgroup layouts.
const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string {
	if v == V2 {
		return "v2"
	}
	return "v1"
}

// HostVersion reports which layout the host uses. A hybrid host (v1
// controllers plus an empty v2 tree) counts as v1.
func HostVersion() Version {
	if occgroups.IsCgroup2UnifiedMode() {
		return V2
	}
	return V1
}

// Errors of this package.
var (
	// ErrInvalidPath says a cgroup path is not absolute and clean.
	ErrInvalidPath = errors.New("invalid cgroup path")
	// ErrInvalidResources says a Resources value is out of range.
	ErrInvalidResources = errors.New("invalid cgroup resources")
)

// Stats is a cgroup's current resource usage.
type Stats struct {
	// CPUUsage is the CPU time used, in nanoseconds.
	CPUUsage uint64 `json:"cpu_usage_ns"`
	// MemoryUsage is the memory in use, in bytes (cache included).
	MemoryUsage uint64 `json:"memory_usage_bytes"`
	// MemoryLimit is the memory limit in bytes (0 when unlimited).
	MemoryLimit uint64 `json:"memory_limit_bytes"`
	// Pids is the number of tasks.
	Pids uint64 `json:"pids"`
	// MemoryAnon is the anonymous and shared memory in use, in bytes: what
	// a checkpoint has to copy as memory pages (no page cache).
	MemoryAnon uint64 `json:"memory_anon_bytes"`
	// OOMKills counts processes the OOM killer killed in the cgroup.
	OOMKills uint64 `json:"oom_kills"`
	// IO is the I/O done per device, sorted by device.
	IO []DeviceIO `json:"io,omitempty"`
}

// Manager controls one cgroup.
type Manager interface {
	// Path returns the cgroup's path below the hierarchy roots.
	Path() string
	// Create makes the cgroup in every controller (idempotent).
	Create() error
	// Exists reports whether the cgroup exists.
	Exists() bool
	// Pids lists the processes in the cgroup and its descendants.
	Pids() ([]int, error)
	// Freeze stops every task in the cgroup and waits until they are frozen.
	Freeze(ctx context.Context) error
	// Thaw resumes a frozen cgroup.
	Thaw() error
	// Stats returns current usage.
	Stats() (Stats, error)
	// Set applies every limit in r (zero fields remove limits) to the
	// controllers the cgroup has. On error some files may have been
	// written: callers re-apply the previous Resources.
	Set(r Resources) error
	// AddProc moves a process, with all its threads, into the cgroup
	// (creating it if needed).
	AddProc(pid int) error
	// Destroy removes the cgroup (and empty child cgroups) in every
	// controller; missing cgroups are not an error.
	Destroy() error
}

// Option tunes New.
type Option func(*options)

type options struct {
	controllers []string
}

// Controllers limits the cgroup to the named v1 controllers' hierarchies
// (e.g. "cpu", "cpuacct"); other hierarchies are neither created nor
// joined. It has no effect on v2, which has one hierarchy.
func Controllers(names ...string) Option {
	return func(o *options) { o.controllers = append(o.controllers, names...) }
}

// New returns the manager of the cgroup at path (it is not created).
func New(path string, opts ...Option) (Manager, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return nil, fmt.Errorf("%w: %q", ErrInvalidPath, path)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	cfg := &occgroups.Cgroup{
		Path: path,
		// Device rules are the OCI runtime's business (runc applies the
		// container's). With no rules here, Create never writes devices.*
		// files, while it still makes the devices cgroup like every
		// other controller's; Set skips devices explicitly.
		Resources: &occgroups.Resources{},
	}
	m, err := manager.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	v := HostVersion()
	if v == V1 && len(o.controllers) > 0 {
		paths := map[string]string{}
		for name, p := range m.GetPaths() {
			if slices.Contains(o.controllers, name) {
				paths[name] = p
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("cgroup %s: none of the controllers %v is mounted", path, o.controllers)
		}
		if m, err = manager.NewWithPaths(cfg, paths); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	return &cgroup{path: path, version: v, m: m}, nil
}

type cgroup struct {
	path    string
	version Version
	m       occgroups.Manager
}

func (c *cgroup) Path() string { return c.path }

func (c *cgroup) Create() error {
	// Apply(-1) creates the cgroup in every controller without moving a
	// process into it.
	if err := c.m.Apply(-1); err != nil {
		return fmt.Errorf("create cgroup %s: %w", c.path, err)
	}
	return nil
}

func (c *cgroup) Exists() bool {
	for _, p := range c.m.GetPaths() {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

func (c *cgroup) Pids() ([]int, error) {
	var pids []int
	var err error
	if c.version == V1 && c.m.Path("devices") == "" {
		// runc's v1 manager lists pids from the devices hierarchy; a
		// cgroup limited to other controllers uses its first one.
		for _, p := range c.m.GetPaths() {
			pids, err = occgroups.GetAllPids(p)
			break
		}
	} else {
		pids, err = c.m.GetAllPids()
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list pids of cgroup %s: %w", c.path, err)
	}
	return pids, nil
}

func (c *cgroup) Freeze(ctx context.Context) error {
	if dir := c.m.Path("freezer"); c.version == V1 && dir != "" {
		if err := freezeV1(ctx, dir); err != nil {
			_ = c.m.Freeze(occgroups.Thawed)
			return fmt.Errorf("freeze cgroup %s: %w", c.path, err)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- c.m.Freeze(occgroups.Frozen) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("freeze cgroup %s: %w", c.path, err)
		}
		return nil
	case <-ctx.Done():
		// The freeze keeps trying in its goroutine; thaw so we never leave a
		// half-frozen cgroup behind when the caller gives up.
		go func() {
			<-done //nolint:errcheck // whatever the freeze did, thaw
			_ = c.m.Freeze(occgroups.Thawed)
		}()
		return fmt.Errorf("freeze cgroup %s: %w", c.path, ctx.Err())
	}
}

func (c *cgroup) Thaw() error {
	if err := c.m.Freeze(occgroups.Thawed); err != nil {
		return fmt.Errorf("thaw cgroup %s: %w", c.path, err)
	}
	return nil
}

func (c *cgroup) Stats() (Stats, error) {
	s, err := c.m.GetStats()
	if err != nil {
		return Stats{}, fmt.Errorf("stats of cgroup %s: %w", c.path, err)
	}
	out := Stats{
		CPUUsage:    s.CpuStats.CpuUsage.TotalUsage,
		MemoryUsage: s.MemoryStats.Usage.Usage,
		Pids:        s.PidsStats.Current,
	}
	for _, k := range anonKeys(c.version) {
		out.MemoryAnon += s.MemoryStats.Stats[k]
	}
	// An unlimited v1 memory cgroup reports a page-rounded "max int64".
	if l := s.MemoryStats.Usage.Limit; l > 0 && l < 1<<62 {
		out.MemoryLimit = l
	}
	if dir := c.m.Path("memory"); dir != "" {
		if out.OOMKills, err = readOOMKills(c.version, dir); err != nil {
			return Stats{}, fmt.Errorf("stats of cgroup %s: %w", c.path, err)
		}
	}
	if dir := c.m.Path("blkio"); dir != "" {
		if out.IO, err = readIOStats(c.version, dir); err != nil {
			return Stats{}, fmt.Errorf("stats of cgroup %s: %w", c.path, err)
		}
	}
	return out, nil
}

func (c *cgroup) Set(r Resources) error {
	if err := r.validate(); err != nil {
		return err
	}
	oci := r.toOCI(c.version)
	// A cgroup limited to some v1 controllers gets only their limits.
	if c.version == V1 {
		if c.m.Path("cpu") == "" {
			oci.CpuShares, oci.CpuQuota, oci.CpuPeriod = 0, 0, 0
		}
		if c.m.Path("memory") == "" {
			oci.Memory = 0
		}
		if c.m.Path("pids") == "" {
			oci.PidsLimit = nil
		}
		if c.m.Path("blkio") == "" {
			oci.BlkioThrottleReadBpsDevice, oci.BlkioThrottleWriteBpsDevice = nil, nil
			oci.BlkioThrottleReadIOPSDevice, oci.BlkioThrottleWriteIOPSDevice = nil, nil
		}
	}
	if err := c.m.Set(oci); err != nil {
		return fmt.Errorf("set limits of cgroup %s: %w", c.path, err)
	}
	if dir := c.m.Path("blkio"); dir != "" {
		if err := setIO(c.version, dir, r); err != nil {
			return fmt.Errorf("set limits of cgroup %s: %w", c.path, err)
		}
	}
	return nil
}

func (c *cgroup) AddProc(pid int) error {
	// Writing a pid to cgroup.procs moves the whole thread group.
	if err := c.m.Apply(pid); err != nil {
		return fmt.Errorf("move pid %d into cgroup %s: %w", pid, c.path, err)
	}
	return nil
}

func (c *cgroup) Destroy() error {
	if err := c.m.Destroy(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", c.path, err)
	}
	return nil
}

// ProcessCgroup returns the cgroup path of a process in the hierarchy that
// holds the given v1 controller (ignored on v2), e.g. "/vessel/web1".
func ProcessCgroup(pid int, controller string) (string, error) {
	paths, err := occgroups.ParseCgroupFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("cgroups of pid %d: %w", pid, err)
	}
	if HostVersion() == V2 {
		return paths[""], nil
	}
	for k, v := range paths {
		for _, c := range strings.Split(k, ",") {
			if c == controller {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("pid %d: no %s controller", pid, controller)
}

// Enter moves the calling process (all its threads) into cg and returns a
// function that moves it back to the cgroups it was in before, in the
// hierarchies cg has. Children started afterwards are born in cg.
func Enter(cg Manager) (leave func() error, err error) {
	c, ok := cg.(*cgroup)
	if !ok {
		return nil, fmt.Errorf("enter cgroup %s: not a cgroup of this package", cg.Path())
	}
	pid := os.Getpid()
	var prev []string
	for name, dir := range c.m.GetPaths() {
		mnt, ok := strings.CutSuffix(dir, c.path)
		if !ok {
			continue
		}
		cur, err := ProcessCgroup(pid, name)
		if err != nil {
			return nil, fmt.Errorf("enter cgroup %s: %w", c.path, err)
		}
		prev = append(prev, filepath.Join(mnt, cur))
	}
	if err := c.AddProc(pid); err != nil {
		return nil, err
	}
	return func() error {
		var errs []error
		for _, dir := range prev {
			if err := occgroups.WriteCgroupProc(dir, pid); err != nil {
				errs = append(errs, fmt.Errorf("leave cgroup %s: %w", c.path, err))
			}
		}
		return errors.Join(errs...)
	}, nil
}

// anonKeys are the memory.stat keys that add up to Stats.MemoryAnon: the
// hierarchical totals on v1, the cgroup's own (already recursive) on v2.
func anonKeys(v Version) []string {
	if v == V2 {
		return []string{"anon", "shmem"}
	}
	return []string{"total_rss", "total_shmem"}
}
