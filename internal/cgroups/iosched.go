package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
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

// SetBFQTunables writes BFQ's settings for disk weights to a device whose
// scheduler is bfq: low_latency off (BFQ raises the weight of every new
// queue for a while, and a reader that starts a process per file is new
// again and again), and slice_idle, how long BFQ keeps the disk for a
// queue that has just emptied, waiting for its next request (0 keeps
// BFQ's own, 8 ms). A reader whose next request comes later than that
// loses its turn, and the split goes to the other one: under an emulated
// CPU (the guest lane's TCG) a reader's think time is longer than 8 ms.
func SetBFQTunables(dev string, sliceIdle time.Duration) error {
	return setBFQTunables(filepath.Join(sysDevBlock, dev, "queue", "iosched"), sliceIdle)
}

func setBFQTunables(dir string, sliceIdle time.Duration) error {
	files := [][2]string{{"low_latency", "0"}}
	if sliceIdle > 0 {
		files = append(files, [2]string{"slice_idle_us", strconv.FormatInt(sliceIdle.Microseconds(), 10)})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			return fmt.Errorf("BFQ %s: %w", f[0], err)
		}
	}
	return nil
}
