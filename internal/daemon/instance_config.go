package daemon

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vesselhost/vessel/internal/cgroups"
)

// Instance configuration keys: resource limits, applied to the container's
// cgroup at start and live to a running container.
const (
	KeyCPU          = "limits.cpu"
	KeyCPUWeight    = "limits.cpu.weight"
	KeyMemory       = "limits.memory"
	KeyProcesses    = "limits.processes"
	KeyDiskRead     = "limits.disk.read"
	KeyDiskWrite    = "limits.disk.write"
	KeyDiskReadOps  = "limits.disk.read_iops"
	KeyDiskWriteOps = "limits.disk.write_iops"
	KeyDiskWeight   = "limits.disk.weight"
)

// Accepted ranges of the limits keys.
const (
	minCores     = 0.01 // the kernel's smallest quota: 1 ms per 100 ms period
	maxCores     = 1024
	minMemory    = 4 << 20 // less cannot even start init
	maxProcesses = 4194304 // the kernel's PID_MAX_LIMIT
	minRate      = 1024
	maxIOPS      = 1_000_000_000
)

// configKeys validates instance configuration keys: each known key maps to
// a checker of its value, whose error states the accepted range. Keys under
// "user." are free-form notes.
var configKeys = map[string]func(string) error{
	KeyCPU: func(v string) error {
		n, err := parseCores(v)
		if err == nil && (n < minCores || n > maxCores) {
			err = fmt.Errorf("must be between %g and %d CPUs", minCores, maxCores)
		}
		return err
	},
	KeyCPUWeight: intRange(cgroups.MinCPUWeight, cgroups.MaxCPUWeight, "(default %d)", cgroups.DefaultCPUWeight),
	KeyMemory: func(v string) error {
		if v == Unlimited {
			return nil
		}
		n, err := parseSize(v)
		if err == nil && n < minMemory {
			err = fmt.Errorf("must be at least %s (e.g. 512MiB, 1GB), or %s", formatSize(minMemory), Unlimited)
		}
		return err
	},
	KeyProcesses: func(v string) error {
		if v == Unlimited {
			return nil
		}
		return intRange(1, maxProcesses, "or %s", Unlimited)(v)
	},
	KeyDiskRead:     checkRate,
	KeyDiskWrite:    checkRate,
	KeyDiskReadOps:  checkIOPS,
	KeyDiskWriteOps: checkIOPS,
	KeyDiskWeight:   intRange(cgroups.MinDiskWeight, cgroups.MaxDiskWeight, "(default %d)", cgroups.DefaultDiskWeight),
	KeyPrivileged: func(v string) error {
		if v != "true" && v != "false" {
			return errors.New(`must be "true" or "false"`)
		}
		return nil
	},
}

// parseInt parses a whole number.
func parseInt(s string) (int64, error) {
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}

func checkRate(v string) error {
	n, err := parseRate(v)
	if err == nil && n < minRate {
		err = fmt.Errorf("must be at least %s per second (e.g. 10MB, 20MiB/s)", formatSize(minRate))
	}
	return err
}

func checkIOPS(v string) error {
	n, err := parseIOPS(v)
	if err == nil && (n < 1 || n > maxIOPS) {
		err = fmt.Errorf("must be between 1 and %d operations per second", maxIOPS)
	}
	return err
}

// intRange checks a whole number between lo and hi; note (a format with
// args) is added to the error.
func intRange(lo, hi int64, note string, args ...any) func(string) error {
	return func(v string) error {
		if n, err := parseInt(v); err != nil || n < lo || n > hi {
			msg := fmt.Sprintf("must be a whole number between %d and %d", lo, hi)
			if note != "" {
				msg += " " + fmt.Sprintf(note, args...)
			}
			return fmt.Errorf("%s", msg)
		}
		return nil
	}
}

// validateConfig checks every key and value; nothing is applied when one is
// wrong.
func validateConfig(cfg map[string]string) error {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := validateKey(k); err != nil {
			return err
		}
		if strings.HasPrefix(k, "user.") {
			continue
		}
		if err := configKeys[k](cfg[k]); err != nil {
			return errorf(ErrInvalid, "%s=%q: %w", k, cfg[k], err)
		}
	}
	return nil
}

// validateKey checks that a key is known (or a user.* note).
func validateKey(k string) error {
	if strings.HasPrefix(k, "user.") && len(k) > len("user.") {
		return nil
	}
	if _, ok := configKeys[k]; !ok {
		return errorf(ErrInvalid, "unknown configuration key %q", k)
	}
	return nil
}

// diskKeys are the keys that need the pool's block devices.
var diskKeys = []string{KeyDiskRead, KeyDiskWrite, KeyDiskReadOps, KeyDiskWriteOps, KeyDiskWeight}

// resourcesFromConfig turns a validated configuration into cgroup limits.
// devices are the whole-disk devices ("MAJ:MIN") the container's I/O lands
// on; each gets the disk limits (or none, which removes earlier ones).
func resourcesFromConfig(cfg map[string]string, devices []string) (cgroups.Resources, error) {
	p := configParser{cfg: cfg}
	r := cgroups.Resources{
		CPUQuota:   p.cores(KeyCPU),
		CPUWeight:  uint64(p.number(KeyCPUWeight, parseInt)),
		MemoryMax:  p.number(KeyMemory, parseSize),
		PidsMax:    p.number(KeyProcesses, parseInt),
		DiskWeight: uint16(p.number(KeyDiskWeight, parseInt)),
	}
	limit := cgroups.DeviceLimit{
		ReadBPS:   uint64(p.number(KeyDiskRead, parseRate)),
		WriteBPS:  uint64(p.number(KeyDiskWrite, parseRate)),
		ReadIOPS:  uint64(p.number(KeyDiskReadOps, parseIOPS)),
		WriteIOPS: uint64(p.number(KeyDiskWriteOps, parseIOPS)),
	}
	if p.err != nil {
		return r, p.err
	}
	for _, dev := range devices {
		d := limit
		var err error
		if d.Major, d.Minor, err = cgroups.ParseDevice(dev); err != nil {
			return r, err
		}
		r.Devices = append(r.Devices, d)
	}
	return r, nil
}

// configParser reads values of a configuration; unset keys (and
// "unlimited") read as 0, no limit. The
// first error sticks (the configuration was validated before, so there
// should be none).
type configParser struct {
	cfg map[string]string
	err error
}

func (p *configParser) number(key string, parse func(string) (int64, error)) int64 {
	v, ok := p.cfg[key]
	if !ok || p.err != nil || v == Unlimited {
		return 0
	}
	n, err := parse(v)
	if err != nil {
		p.err = errorf(ErrInvalid, "%s=%q: %w", key, v, err)
	}
	return n
}

func (p *configParser) cores(key string) float64 {
	v, ok := p.cfg[key]
	if !ok || p.err != nil {
		return 0
	}
	n, err := parseCores(v)
	if err != nil {
		p.err = errorf(ErrInvalid, "%s=%q: %w", key, v, err)
	}
	return n
}

// hasDiskLimits reports whether cfg sets any disk limit or weight.
func hasDiskLimits(cfg map[string]string) bool {
	for _, k := range diskKeys {
		if _, ok := cfg[k]; ok {
			return true
		}
	}
	return false
}
