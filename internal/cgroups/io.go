package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
)

// ErrNoDiskWeight says a disk weight was asked for, but the kernel offers no
// proportional I/O scheduler to this cgroup: BFQ is not loaded (v1 and v2)
// and, on v2, the io controller has no io.weight (iocost).
var ErrNoDiskWeight = errors.New("no proportional I/O scheduler for disk weights (load BFQ: modprobe bfq)")

// diskWeightFiles lists where a disk weight goes, in order. Every file that
// exists is written; a weight other than the default with none of them is
// an error.
//
//   - v1: blkio.bfq.weight, present while the BFQ scheduler is loaded (CFQ's
//     blkio.weight went with CFQ in Linux 5.0). It applies on devices whose
//     scheduler is bfq only.
//   - v2: io.bfq.weight (BFQ, same scale) and io.weight (iocost, enabled per
//     device with io.cost.qos at the root; scale 1..10000 with the same
//     default 100, so the BFQ number keeps its meaning).
func diskWeightFiles(v Version, w uint16) [][2]string {
	n := strconv.Itoa(int(w))
	if v == V2 {
		return [][2]string{{"io.bfq.weight", n}, {"io.weight", "default " + n}}
	}
	return [][2]string{{"blkio.bfq.weight", n}}
}

// setIO writes what toOCI leaves out: the disk weight (both layouts; runc's
// library would fall back on v2 to io.weight through a conversion that maps
// the default 100 to 910), and on v2 the io.max lines, because the library
// writes a rate of 0 as "rbps=0", which the kernel refuses with ERANGE,
// instead of "rbps=max" to remove a limit.
func setIO(v Version, dir string, r Resources) error {
	wrote := false
	for _, f := range diskWeightFiles(v, r.diskWeight()) {
		if _, err := os.Stat(filepath.Join(dir, f[0])); err != nil {
			continue
		}
		if err := occgroups.WriteFile(dir, f[0], f[1]); err != nil {
			return fmt.Errorf("disk weight: %w", err)
		}
		wrote = true
	}
	if !wrote && r.DiskWeight != 0 && r.DiskWeight != DefaultDiskWeight {
		return ErrNoDiskWeight
	}
	if v == V2 {
		for _, d := range r.Devices {
			if err := occgroups.WriteFile(dir, "io.max", ioMaxLine(d)); err != nil {
				return fmt.Errorf("io.max: %w", err)
			}
		}
	}
	return nil
}

// ioMaxLine is a device's io.max line; unlimited rates are "max".
func ioMaxLine(d DeviceLimit) string {
	f := func(v uint64) string {
		if v == 0 {
			return "max"
		}
		return strconv.FormatUint(v, 10)
	}
	return fmt.Sprintf("%d:%d rbps=%s wbps=%s riops=%s wiops=%s",
		d.Major, d.Minor, f(d.ReadBPS), f(d.WriteBPS), f(d.ReadIOPS), f(d.WriteIOPS))
}

// DeviceIO is the I/O a cgroup (and its descendants) did on one device.
type DeviceIO struct {
	// Device is "MAJ:MIN"; Name the kernel's name ("loop3", "vda"), empty
	// if the device is gone.
	Device string `json:"device"`
	Name   string `json:"name,omitempty"`
	// Bytes and operations read and written.
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
	ReadOps    uint64 `json:"read_ops"`
	WriteOps   uint64 `json:"write_ops"`
}

// readIOStats returns per-device I/O counters, sorted by device.
//
// On v1 they come from blkio.throttle.io_service_bytes_recursive and
// io_serviced_recursive: since Linux 5.0 these count every bio charged to
// the cgroup, whatever the scheduler (runc's library prefers the BFQ files
// when BFQ is loaded, which count only devices BFQ schedules). On v2 they
// come from io.stat.
func readIOStats(v Version, dir string) ([]DeviceIO, error) {
	byDev := map[string]*DeviceIO{}
	get := func(dev string) *DeviceIO {
		if byDev[dev] == nil {
			byDev[dev] = &DeviceIO{Device: dev}
		}
		return byDev[dev]
	}
	if v == V2 {
		if err := parseIOStat(dir, get); err != nil {
			return nil, err
		}
	} else {
		if err := parseBlkioRWStat(dir, "blkio.throttle.io_service_bytes_recursive", get, func(d *DeviceIO) (*uint64, *uint64) { return &d.ReadBytes, &d.WriteBytes }); err != nil {
			return nil, err
		}
		if err := parseBlkioRWStat(dir, "blkio.throttle.io_serviced_recursive", get, func(d *DeviceIO) (*uint64, *uint64) { return &d.ReadOps, &d.WriteOps }); err != nil {
			return nil, err
		}
	}
	out := make([]DeviceIO, 0, len(byDev))
	for _, d := range byDev {
		d.Name = DeviceName(d.Device)
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out, nil
}

// parseBlkioRWStat reads a v1 blkio rwstat file ("MAJ:MIN Read N" lines,
// also Write, Sync, Async, Discard, Total, and a final "Total N").
func parseBlkioRWStat(dir, file string, get func(string) *DeviceIO, fields func(*DeviceIO) (*uint64, *uint64)) error {
	return scanLines(dir, file, func(line string) error {
		f := strings.Fields(line)
		if len(f) != 3 || (f[1] != "Read" && f[1] != "Write") {
			return nil
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: bad line %q", file, line)
		}
		r, w := fields(get(f[0]))
		if f[1] == "Read" {
			*r = n
		} else {
			*w = n
		}
		return nil
	})
}

// parseIOStat reads v2 io.stat ("MAJ:MIN rbytes=N wbytes=N rios=N wios=N
// dbytes=N dios=N").
func parseIOStat(dir string, get func(string) *DeviceIO) error {
	return scanLines(dir, "io.stat", func(line string) error {
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil
		}
		d := get(f[0])
		for _, kv := range f[1:] {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return fmt.Errorf("io.stat: bad field %q", kv)
			}
			switch k {
			case "rbytes":
				d.ReadBytes = n
			case "wbytes":
				d.WriteBytes = n
			case "rios":
				d.ReadOps = n
			case "wios":
				d.WriteOps = n
			}
		}
		return nil
	})
}

// readOOMKills returns how many processes the OOM killer killed in the
// cgroup: "oom_kill" in v1's memory.oom_control (Linux 4.13+) or in v2's
// memory.events.
func readOOMKills(v Version, dir string) (uint64, error) {
	file := "memory.oom_control"
	if v == V2 {
		file = "memory.events"
	}
	var n uint64
	err := scanLines(dir, file, func(line string) error {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			var err error
			n, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return err
		}
		return nil
	})
	return n, err
}

// scanLines calls fn for every line of a cgroup file; a missing file has
// no lines.
func scanLines(dir, file string, fn func(string) error) error {
	f, err := occgroups.OpenFile(dir, file, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}
