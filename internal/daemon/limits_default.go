package daemon

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Default limits protect the host from a container that sets none: a fork
// bomb stops at limits.processes, a memory hog is OOM-killed inside its own
// cgroup at limits.memory, before the host runs out. They are the daemon's
// (Config.DefaultLimits, vesseld --default-limit KEY=VALUE), not the
// instance's: an instance's record keeps only what its user set, and the
// defaults in force where it starts fill the rest at every start (so an
// existing instance gets a new default at its next start, and a container
// moved in gets its target's defaults). A value the user sets always wins;
// "unlimited" asks for no limit, as an instance's value or as a default.
//
// Unless configured, the defaults are derived from the host at start:
//
//	limits.processes = min(10000, kernel.pid_max / 4)
//	limits.memory    = host memory - max(host memory / 10, 256 MiB), in MiB
//
// A quarter of the host's PIDs per container leaves the host room to work
// while one container is full; 10000 tasks is far beyond what a system
// container's services need. The memory reserve keeps the host's own
// processes (vesseld, sshd, the page cache it needs) out of the kernel's
// global OOM killer when one container allocates everything.

// Unlimited, as the value of limits.memory or limits.processes, asks for no
// limit (the host default does not apply).
const Unlimited = "unlimited"

// Derivation of the default limits (see above).
const (
	maxDefaultProcesses = 10000
	minDefaultProcesses = 64
	minMemoryReserve    = 256 << 20
)

// deriveDefaultLimits returns the default limits for a host with memTotal
// bytes of memory and the given kernel.pid_max.
func deriveDefaultLimits(memTotal uint64, pidMax int64) map[string]string {
	procs := min(int64(maxDefaultProcesses), max(pidMax/4, minDefaultProcesses))
	reserve := max(memTotal/10, minMemoryReserve)
	mem := int64(minMemory)
	if memTotal > reserve+minMemory {
		mem = int64(memTotal - reserve)
	}
	mem = max(mem&^(1<<20-1), minMemory) // whole MiB
	return map[string]string{
		KeyProcesses: strconv.FormatInt(procs, 10),
		KeyMemory:    formatSize(mem),
	}
}

// hostDefaultLimits derives the default limits from this host.
func hostDefaultLimits() (map[string]string, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil, fmt.Errorf("default limits: host memory: %w", err)
	}
	memTotal := uint64(si.Totalram) * uint64(si.Unit) //nolint:unconvert // uint32 fields on 32-bit
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil, fmt.Errorf("default limits: %w", err)
	}
	pidMax, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("default limits: kernel.pid_max: %w", err)
	}
	return deriveDefaultLimits(memTotal, pidMax), nil
}

// effectiveDefaultLimits returns the host's derived defaults with the
// configured ones (limits.* keys; an empty value drops a default) over
// them, validated.
func effectiveDefaultLimits(configured map[string]string) (map[string]string, error) {
	out, err := hostDefaultLimits()
	if err != nil {
		return nil, err
	}
	for k, v := range configured {
		if !strings.HasPrefix(k, "limits.") {
			return nil, errorf(ErrInvalid, "default limit %q: only limits.* keys have defaults", k)
		}
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	if err := validateConfig(out); err != nil {
		return nil, fmt.Errorf("default limits: %w", err)
	}
	return out, nil
}

// withDefaults returns an instance's configuration with the daemon's
// default limits filling the keys it does not set: the limits it runs with.
func (d *Daemon) withDefaults(cfg map[string]string) map[string]string {
	out := maps.Clone(d.cfg.DefaultLimits)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, cfg)
	return out
}

// defaultsFor returns the default limits that apply to an instance with
// configuration cfg: those of the keys it does not set.
func (d *Daemon) defaultsFor(cfg map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range d.cfg.DefaultLimits {
		if _, set := cfg[k]; !set {
			out[k] = v
		}
	}
	return out
}
