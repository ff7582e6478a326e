// Command iolimit checks that vessel's disk limits hold on the real kernel,
// with dd inside busybox containers on the btrfs loop pool, or on a pool
// on a disk of its own (-storage-source, e.g. a guest's QEMU-throttled
// virtual disk in the guest lane, where the disk is the real bottleneck):
//
//   - bandwidth: under limits.disk.read/write = X MB/s, direct writes,
//     direct reads and buffered reads (of data not in any cache) run at X
//     (goal: within 10%); buffered writes are measured with the writer's
//     fsync and flushed by the host afterwards, the writeback cgroup v1
//     cannot limit and v2 charges to the writer (goal on v2: within 10%);
//   - IOPS: under limits.disk.read_iops = K, 4 KiB direct reads run at K;
//   - weights: two containers reading at once with limits.disk.weight 2:1
//     share the disk 2:1 (goal: within 15%), against the same pair with
//     equal weights in the same run;
//   - overhead: limits configured far above what the disk does (not
//     binding) against no limits, alternating (goal: under 5%).
//
// It prints JSON.
//
//	go run ./bench/iolimit -mbps 20 -size 128 -reps 3 -window 20s -overhead-reps 20
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Check is a measured rate against its target.
type Check struct {
	Rate     benchutil.Stats `json:"rate"`
	Target   float64         `json:"target"`
	ErrorPct float64         `json:"error_pct"`
	Within   bool            `json:"within_tolerance"`
}

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark     string            `json:"benchmark"`
	Machine       benchutil.Machine `json:"machine"`
	Cgroup        string            `json:"cgroup_version"`
	SizeMiB       int               `json:"file_mib"`
	BufferedMiB   int               `json:"buffered_synced_mib"`
	Reps          int               `json:"reps"`
	OverheadFiles [2]int            `json:"overhead_files_per_run_read_write"`
	LimitMBps     float64           `json:"limit_mb_per_s"`
	Limited       struct {
		WriteDirect Check `json:"write_direct_mb_per_s"`
		ReadDirect  Check `json:"read_direct_mb_per_s"`
		ReadCold    Check `json:"read_buffered_uncached_mb_per_s"`
		// Buffered writes are reported, not checked: on cgroup v1 the
		// kernel's flusher threads write dirty pages back unthrottled (the
		// writer only dirties the page cache), while an fsync issued by
		// the writer submits the I/O itself and is throttled.
		WriteBuffered      benchutil.Stats `json:"write_buffered_mb_per_s"`
		WriteBufferedFsync benchutil.Stats `json:"write_buffered_fsync_mb_per_s"`
		// WriteBufferedSynced is a buffered write flushed by the host
		// (sync -f on the pool, outside the container) timed to the end of
		// the flush: the writeback the writer itself never waits for. Only
		// cgroup v2 charges it to the writer's cgroup and so holds it to
		// the limit; it is checked there, reported on v1.
		WriteBufferedSynced Check `json:"write_buffered_host_synced_mb_per_s"`
		// WriteBufferedSyncedDevice is the same runs' rate at the device:
		// the bytes the container's cgroup wrote to the pool's device
		// (its io.stat: data plus the filesystem's metadata and
		// checksums, all charged to the writer on v2), over the same
		// time. io.max limits this rate.
		WriteBufferedSyncedDevice Check `json:"write_buffered_host_synced_device_mb_per_s"`
		ReadIOPS                  Check `json:"read_iops"`
	} `json:"limited"`
	Weights struct {
		Weights        string  `json:"weights"`
		WindowS        float64 `json:"window_s"`
		FileMiB        int     `json:"file_mib"`
		Ratio          Check   `json:"bytes_ratio"`
		EqualRatio     float64 `json:"equal_weights_bytes_ratio"`
		HeavyMBps      float64 `json:"heavy_mb_per_s"`
		LightMBps      float64 `json:"light_mb_per_s"`
		LoopScheduler  string  `json:"loop_scheduler"`
		PoolDevice     string  `json:"pool_device"`
		EqualHeavyMBps float64 `json:"equal_first_mb_per_s"`
		EqualLightMBps float64 `json:"equal_second_mb_per_s"`
		// BFQ's tunables on the pool's device during the runs
		// (queue/iosched: low_latency, slice_idle_us).
		BFQ map[string]string `json:"bfq_tunables,omitempty"`
	} `json:"weights"`
	Overhead struct {
		UnlimitedReadMBps   benchutil.Stats `json:"unlimited_read_direct_mb_per_s"`
		NonBindingReadMBps  benchutil.Stats `json:"nonbinding_read_direct_mb_per_s"`
		ReadOverheadPct     float64         `json:"read_overhead_pct"`
		UnlimitedWriteMBps  benchutil.Stats `json:"unlimited_write_direct_mb_per_s"`
		NonBindingWriteMBps benchutil.Stats `json:"nonbinding_write_direct_mb_per_s"`
		WriteOverheadPct    float64         `json:"write_overhead_pct"`
		// Paired* are the medians of the per-pair overheads: each pair is
		// two neighbouring runs, one of each setting.
		PairedReadOverheadPct  float64 `json:"paired_read_overhead_pct"`
		PairedWriteOverheadPct float64 `json:"paired_write_overhead_pct"`
		Within                 bool    `json:"within_5pct"`
	} `json:"overhead"`
}

type bench struct {
	r    *testhost.Runner
	h    *testhost.Host
	size int
	// weightsSize is the file each weighted reader reads in a loop, MiB:
	// a larger one means fewer dd processes started per window, each a
	// gap in the reader's requests (tens of ms under an emulated CPU).
	weightsSize int
	// overheadKeys are the limits.disk.* keys the overhead test sets;
	// nonBindingIOPS is its IOPS value.
	overheadKeys   string
	nonBindingIOPS string
	// source is the pool's btrfs directory when it is not a loop file
	// (-storage-source); poolDev is the name prefix of the pool's block
	// device(s): "loop", or e.g. "vdb".
	source  string
	poolDev string
	// syncPath is what flush syncs: the pool's file system.
	syncPath string
	// bufSize is the MiB of each host-flushed buffered write.
	bufSize int
}

func main() {
	mbps := flag.Float64("mbps", 20, "bandwidth limit, MB/s (decimal)")
	size := flag.Int("size", 128, "file size, MiB")
	reps := flag.Int("reps", 3, "repetitions of each measurement")
	iops := flag.Int("iops", 200, "read IOPS limit")
	overheadKeys := flag.String("overhead-keys", "read,write,read_iops,write_iops", "limits.disk.* keys set (far above the disk's speed) in the overhead test")
	nonBindingIOPS := flag.String("nonbinding-iops", "100000", "IOPS limit of the overhead test (far above what the loop device does with 1 MiB direct I/O)")
	overheadReps := flag.Int("overhead-reps", 20, "runs of each setting in the overhead test")
	window := flag.Duration("window", 20*time.Second, "measuring window of the weights test")
	source := flag.String("storage-source", "", "pool on this existing btrfs directory (its disk, e.g. a guest's throttled virtual disk, is then the one measured) instead of a loop-backed file")
	parts := flag.String("parts", "limits,overhead,weights", "which measurements to run")
	bufSize := flag.Int("buffered-size", 0, "MiB written by each host-flushed buffered write (default -size): larger runs hide the fixed cost of an exec")
	device := flag.String("storage-device", "", "pool on this btrfs block device (vesseld --storage-device: vessel's own disk, BFQ made its scheduler for weights), e.g. a guest's throttled virtual disk")
	weightsSize := flag.Int("weights-size", 0, "MiB of the file each reader of the weights test reads in a loop (default -size)")
	deviceIdle := flag.Duration("storage-device-idle", 0, "vesseld --storage-device-idle: BFQ's slice_idle on the storage device (0: BFQ's own)")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	opts := testhost.Options{StorageSizeMiB: 4096 + 6**size}
	switch {
	case *source != "":
		opts.ExtraArgs = []string{"--storage-source", *source}
	case *device != "":
		opts.ExtraArgs = []string{"--storage-device", *device, "--storage-device-idle", deviceIdle.String()}
	}
	h := testhost.New(r, bin, opts)
	b := &bench{r: r, h: h, size: *size, weightsSize: cmp.Or(*weightsSize, *size), overheadKeys: *overheadKeys, nonBindingIOPS: *nonBindingIOPS, source: *source, poolDev: "loop",
		syncPath: filepath.Join(h.Root(), "disks", "default.img")}
	switch {
	case *source != "":
		b.syncPath = *source
	case *device != "":
		b.syncPath = filepath.Join(h.Root(), "storage-pools", "default")
	}
	if *source != "" || *device != "" {
		devs := b.server().Host.StorageDevices
		if len(devs) == 0 {
			r.Fatalf("no block device found under %s", *source)
		}
		b.poolDev = devs[0].Name
	}

	res := Result{Benchmark: "iolimit", Machine: benchutil.ThisMachine(), SizeMiB: *size, Reps: *reps, LimitMBps: *mbps}
	srv, err := h.Client().Server(context.Background())
	if err != nil {
		r.Fatalf("%v", err)
	}
	res.Cgroup = srv.Host.CgroupVersion

	b.bufSize = *size
	if *bufSize > 0 {
		b.bufSize = *bufSize
	}
	res.BufferedMiB = b.bufSize
	if strings.Contains(*parts, "limits") {
		b.limits(&res, *mbps, *iops, *reps)
	}
	if strings.Contains(*parts, "overhead") {
		b.overhead(&res, *overheadReps)
	}
	if strings.Contains(*parts, "weights") {
		b.weights(&res, *window)
	}

	benchutil.Emit(r, res, *out)
}

// limits measures rates under a binding limit.
func (b *bench) limits(res *Result, mbps float64, iops, reps int) {
	b.h.OK("launch", "busybox", "io1")
	// Files to read, written unlimited: one for direct reads, one per
	// repetition for buffered reads (each read once, so never cached: a
	// direct write leaves nothing in the page cache).
	b.dd("io1", "if=/dev/zero", "of=/direct", "oflag=direct")
	for i := range reps {
		b.dd("io1", "if=/dev/zero", fmt.Sprintf("of=/cold%d", i), "oflag=direct")
	}
	b.h.OK("config", "set", "io1",
		fmt.Sprintf("limits.disk.read=%gMB", mbps), fmt.Sprintf("limits.disk.write=%gMB", mbps),
		fmt.Sprintf("limits.disk.read_iops=%d", iops))
	var wd, rd, rc, wb, wbf, wbs, wbsd, ri []float64
	for i := range reps {
		b.r.Logf("limited, rep %d", i+1)
		wd = append(wd, b.dd("io1", "if=/dev/zero", "of=/w", "oflag=direct"))
		rd = append(rd, b.dd("io1", "if=/direct", "of=/dev/null", "iflag=direct"))
		rc = append(rc, b.dd("io1", fmt.Sprintf("if=/cold%d", i), "of=/dev/null"))
		wb = append(wb, b.dd("io1", "if=/dev/zero", fmt.Sprintf("of=/wb%d", i)))
		wbf = append(wbf, b.dd("io1", "if=/dev/zero", "of=/wbf", "conv=fsync"))
		file, dev := b.ddSynced("io1", fmt.Sprintf("of=/wbs%d", i))
		wbs, wbsd = append(wbs, file), append(wbsd, dev)
		ri = append(ri, b.ops("io1", iops))
	}
	res.Limited.WriteDirect = check(wd, mbps, 10)
	res.Limited.ReadDirect = check(rd, mbps, 10)
	res.Limited.ReadCold = check(rc, mbps, 10)
	res.Limited.WriteBuffered = benchutil.Summarise(wb)
	res.Limited.WriteBufferedFsync = benchutil.Summarise(wbf)
	res.Limited.WriteBufferedSynced = check(wbs, mbps, 10)
	res.Limited.WriteBufferedSyncedDevice = check(wbsd, mbps, 10)
	res.Limited.ReadIOPS = check(ri, float64(iops), 10)
	b.h.OK("delete", "--force", "io1")
}

// overhead compares no limits with limits far above the disk's speed,
// alternating them, reps runs of each.
func (b *bench) overhead(res *Result, reps int) {
	b.h.OK("launch", "busybox", "io2")
	b.dd("io2", "if=/dev/zero", "of=/f", "oflag=direct")
	// Unlimited, these run at memory speed (the loop device's backing file
	// is in the host's page cache): each run moves enough files to last
	// seconds, so busybox time's 10 ms resolution does not matter; writes
	// last 2 s, below the host's dirty-page thresholds.
	readArgs := []string{"if=/f", "of=/dev/null", "iflag=direct"}
	writeArgs := []string{"if=/dev/zero", "of=/g", "oflag=direct"}
	readLoops, writeLoops := b.calibrate("io2", 4*time.Second, readArgs...), b.calibrate("io2", 2*time.Second, writeArgs...)
	b.r.Logf("overhead runs move %d files (read), %d files (write)", readLoops, writeLoops)
	values := map[string]string{"read": "100GB", "write": "100GB", "read_iops": b.nonBindingIOPS, "write_iops": b.nonBindingIOPS}
	var nonBinding, keys []string
	for _, k := range strings.Split(b.overheadKeys, ",") {
		key := "limits.disk." + k
		nonBinding, keys = append(nonBinding, key+"="+values[k]), append(keys, key)
	}
	var ur, nr, uw, nw []float64
	// A B B A order, so that drift (the pool filling, other load) favours
	// neither setting; each run starts with the pool's backing file
	// flushed, so no run pays for the dirty pages of the one before.
	for i := range 2 * reps {
		limited := i%4 == 1 || i%4 == 2
		if limited {
			b.h.OK(append([]string{"config", "set", "io2"}, nonBinding...)...)
		} else {
			b.h.OK(append([]string{"config", "unset", "io2"}, keys...)...)
		}
		b.r.Logf("overhead, limits configured: %v", limited)
		b.flush()
		rd := b.ddLoop("io2", readLoops, readArgs...)
		b.flush()
		wr := b.ddLoop("io2", writeLoops, writeArgs...)
		b.r.Logf("  read %.0f MB/s, write %.0f MB/s", rd, wr)
		if limited {
			nr, nw = append(nr, rd), append(nw, wr)
		} else {
			ur, uw = append(ur, rd), append(uw, wr)
		}
	}
	o := &res.Overhead
	o.UnlimitedReadMBps, o.NonBindingReadMBps = benchutil.Summarise(ur), benchutil.Summarise(nr)
	o.UnlimitedWriteMBps, o.NonBindingWriteMBps = benchutil.Summarise(uw), benchutil.Summarise(nw)
	o.ReadOverheadPct = pct(o.UnlimitedReadMBps.Median-o.NonBindingReadMBps.Median, o.UnlimitedReadMBps.Median)
	o.WriteOverheadPct = pct(o.UnlimitedWriteMBps.Median-o.NonBindingWriteMBps.Median, o.UnlimitedWriteMBps.Median)
	o.PairedReadOverheadPct, o.PairedWriteOverheadPct = paired(ur, nr), paired(uw, nw)
	o.Within = o.PairedReadOverheadPct < 5 && o.PairedWriteOverheadPct < 5
	res.OverheadFiles = [2]int{readLoops, writeLoops}
	b.h.OK("delete", "--force", "io2")
}

// paired returns the median over i of (u[i]-l[i])/u[i], in percent: runs
// i of the two settings ran next to each other.
func paired(u, l []float64) float64 {
	var d []float64
	for i := range min(len(u), len(l)) {
		d = append(d, (u[i]-l[i])/u[i])
	}
	return round(100 * benchutil.Summarise(d).Median)
}

// flush writes the pool's backing file's dirty pages to disk (host side).
func (b *bench) flush() {
	if out, err := exec.Command("sync", "-f", b.syncPath).CombinedOutput(); err != nil {
		b.r.Fatalf("sync: %v: %s", err, out)
	}
}

// calibrate returns how many files a dd with args (one file's worth) must
// move in a row to take about d.
func (b *bench) calibrate(name string, d time.Duration, args ...string) int {
	args = append(args, "bs=1M", fmt.Sprintf("count=%d", b.size))
	secs := b.timed(name, 4, args) / 4
	return min(max(int(d.Seconds()/secs), 4), 2000)
}

// weights runs two readers at once, first with weights 200:100, then
// 100:100, and compares the bytes each read from the pool's device.
func (b *bench) weights(res *Result, window time.Duration) {
	for _, n := range []string{"w1", "w2"} {
		b.h.OK("launch", "busybox", n)
		b.h.OK("exec", n, "--", "dd", "if=/dev/zero", "of=/big", "oflag=direct", "bs=1M", fmt.Sprintf("count=%d", b.weightsSize))
	}
	w := &res.Weights
	w.Weights, w.WindowS, w.FileMiB = "200:100", window.Seconds(), b.weightsSize
	b.h.OK("config", "set", "w1", "limits.disk.weight=200")
	b.h.OK("config", "set", "w2", "limits.disk.weight=100")
	w.PoolDevice = b.poolDev
	for _, d := range b.server().Host.StorageDevices {
		if strings.HasPrefix(d.Name, b.poolDev) {
			w.LoopScheduler = d.Scheduler
		}
	}
	if dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", b.poolDev)); err == nil {
		for _, f := range []string{"low_latency", "slice_idle_us"} {
			if v, err := os.ReadFile(filepath.Join(dev, "queue", "iosched", f)); err == nil {
				if w.BFQ == nil {
					w.BFQ = map[string]string{}
				}
				w.BFQ[f] = strings.TrimSpace(string(v))
			}
		}
	}
	b.r.Logf("weights 200:100")
	heavy, light := b.compete(window)
	w.HeavyMBps, w.LightMBps = round(heavy/1e6/window.Seconds()), round(light/1e6/window.Seconds())
	w.Ratio = check([]float64{heavy / light}, 2, 15)

	b.h.OK("config", "set", "w1", "limits.disk.weight=100")
	b.r.Logf("weights 100:100")
	first, second := b.compete(window)
	w.EqualRatio = round(first / second)
	w.EqualHeavyMBps, w.EqualLightMBps = round(first/1e6/window.Seconds()), round(second/1e6/window.Seconds())
	b.h.OK("delete", "--force", "w1", "w2")
}

// compete runs direct-I/O readers in w1 and w2 and returns the bytes each
// read from the pool's device during the window (after a 2 s warm-up).
func (b *bench) compete(window time.Duration) (float64, float64) {
	secs := int((window + 4*time.Second).Seconds())
	script := fmt.Sprintf(`end=$(( $(date +%%s) + %d )); while [ $(date +%%s) -lt $end ]; do dd if=/big of=/dev/null bs=1M iflag=direct 2>/dev/null; done`, secs)
	var wg sync.WaitGroup
	for _, n := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.h.OK("exec", n, "--", "sh", "-c", script)
		}()
	}
	time.Sleep(2 * time.Second)
	a0, c0 := b.poolRead("w1"), b.poolRead("w2")
	time.Sleep(window)
	a1, c1 := b.poolRead("w1"), b.poolRead("w2")
	wg.Wait()
	return a1 - a0, c1 - c0
}

// poolRead returns the bytes a container read from the pool's device so far.
func (b *bench) poolRead(name string) float64 { return b.poolIO(name, true) }

// poolIO returns the bytes a container read (or wrote) on the pool's
// device so far.
func (b *bench) poolIO(name string, read bool) float64 {
	i, err := b.h.Client().Instance(context.Background(), name)
	if err != nil || i.State == nil {
		b.r.Fatalf("info %s: %v", name, err)
	}
	var n float64
	for _, io := range i.State.IO {
		if !strings.HasPrefix(io.Name, b.poolDev) {
			continue
		}
		if read {
			n += float64(io.ReadBytes)
		} else {
			n += float64(io.WriteBytes)
		}
	}
	return n
}

func (b *bench) server() api.Server {
	s, err := b.h.Client().Server(context.Background())
	if err != nil {
		b.r.Fatalf("%v", err)
	}
	return s
}

// dd runs busybox dd with 1 MiB blocks over b.size MiB in a container and
// returns its rate in MB/s (decimal).
func (b *bench) dd(name string, args ...string) float64 {
	return b.ddLoop(name, 1, args...)
}

// ddLoop runs the same dd loops times in a row and returns the rate over
// all of them, in MB/s.
func (b *bench) ddLoop(name string, loops int, args ...string) float64 {
	args = append(args, "bs=1M", fmt.Sprintf("count=%d", b.size))
	secs := b.timed(name, loops, args)
	return round(float64(loops) * float64(b.size<<20) / secs / 1e6)
}

// ops runs 4 KiB direct reads for about 5 s at the given limit and returns
// operations per second.
func (b *bench) ops(name string, iops int) float64 {
	count := 5 * iops
	secs := b.timed(name, 1, []string{"if=/direct", "of=/dev/null", "iflag=direct", "bs=4k", fmt.Sprintf("count=%d", count)})
	return round(float64(count) / secs)
}

// timed runs dd with args loops times in the container and returns the
// elapsed seconds as busybox time measures them (10 ms resolution, so
// callers move at least a few seconds' worth). Busybox's dd prints no
// rate.
func (b *bench) timed(name string, loops int, args []string) float64 {
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do dd %s 2>/dev/null || exit 1; i=$((i+1)); done`, loops, strings.Join(args, " "))
	r := b.h.Vessel("exec", name, "--", "time", "-f", "%e", "sh", "-c", script)
	lines := strings.Fields(r.Stderr)
	var secs float64
	var err error
	if len(lines) > 0 {
		secs, err = strconv.ParseFloat(lines[len(lines)-1], 64)
	}
	if r.Code != 0 || len(lines) == 0 || err != nil || secs <= 0 {
		b.r.Fatalf("dd %v x%d: %s", args, loops, r)
	}
	return secs
}

// ddSynced writes b.size MiB buffered (no fsync) in a container, then
// flushes the pool from the host, and returns the rate over both, in MB/s:
// of the file, and of the bytes the container's cgroup wrote to the pool's
// device meanwhile.
func (b *bench) ddSynced(name, of string) (file, device float64) {
	b.flush()
	w0 := b.poolIO(name, false)
	start := time.Now()
	b.timed(name, 1, []string{"if=/dev/zero", of, "bs=1M", fmt.Sprintf("count=%d", b.bufSize)})
	b.flush()
	secs := time.Since(start).Seconds()
	w1 := b.poolIO(name, false)
	return round(float64(b.bufSize<<20) / secs / 1e6), round((w1 - w0) / secs / 1e6)
}

// check summarises samples against a target with a tolerance in percent.
func check(samples []float64, target, tolPct float64) Check {
	s := benchutil.Summarise(samples)
	e := pct(s.Median-target, target)
	return Check{Rate: s, Target: target, ErrorPct: e, Within: e >= -tolPct && e <= tolPct}
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(100 * a / b)
}

func round(v float64) float64 {
	if v < 0 {
		return -round(-v)
	}
	return float64(int64(v*1000+0.5)) / 1000
}
