package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Disk weights need a proportional I/O scheduler on the device: BFQ (v1 and
// v2) or iocost (v2). Loop devices have none by default ("none"), and
// virtual disks usually run mq-deadline. These helpers read and set a
// device's scheduler through /sys/dev/block/MAJ:MIN/queue/scheduler.

// sysDevBlock is where the kernel lists block devices by number.
const sysDevBlock = "/sys/dev/block"

// DeviceName returns the kernel's name of a "MAJ:MIN" block device
// ("loop3", "vda"), or "" if there is none.
func DeviceName(dev string) string {
	target, err := os.Readlink(filepath.Join(sysDevBlock, dev))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// Scheduler returns a device's active I/O scheduler ("bfq", "mq-deadline",
// "none") and the ones it offers.
func Scheduler(dev string) (active string, available []string, err error) {
	b, err := os.ReadFile(filepath.Join(sysDevBlock, dev, "queue", "scheduler"))
	if err != nil {
		return "", nil, fmt.Errorf("I/O scheduler of %s: %w", dev, err)
	}
	active, available = parseScheduler(string(b))
	return active, available, nil
}

// parseScheduler parses a queue/scheduler file: "[none] mq-deadline bfq".
func parseScheduler(s string) (active string, available []string) {
	for _, f := range strings.Fields(s) {
		if name, ok := strings.CutPrefix(f, "["); ok {
			f = strings.TrimSuffix(name, "]")
			active = f
		}
		available = append(available, f)
	}
	return active, available
}

// SetScheduler makes sched the device's I/O scheduler (idempotent). The
// scheduler must be built in or loaded (BFQ: modprobe bfq).
func SetScheduler(dev, sched string) error {
	active, available, err := Scheduler(dev)
	if err != nil {
		return err
	}
	if active == sched {
		return nil
	}
	if !slices.Contains(available, sched) {
		return fmt.Errorf("device %s (%s) offers no %s scheduler (has %s)", dev, DeviceName(dev), sched, strings.Join(available, ", "))
	}
	p := filepath.Join(sysDevBlock, dev, "queue", "scheduler")
	if err := os.WriteFile(p, []byte(sched), 0o644); err != nil {
		return fmt.Errorf("set I/O scheduler of %s to %s: %w", dev, sched, err)
	}
	return nil
}

// IsLoop reports whether a "MAJ:MIN" device is a loop device.
func IsLoop(dev string) bool {
	return strings.HasPrefix(DeviceName(dev), "loop")
}
