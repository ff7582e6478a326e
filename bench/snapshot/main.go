// Command snapshot measures vessel's snapshots against the raw bandwidth of
// the same storage, measured in the same run:
//
//   - the frozen time of a disk-only snapshot (btrfs ioctl under a frozen
//     cgroup);
//   - for containers holding S MiB of dirty anonymous memory (a memhog
//     process; S = 0 is an idle busybox container): the frozen time and
//     total time of a stateful snapshot, the memory image write rate (page
//     bytes / time from the dump's start until they are durable) and the
//     stateful restore rate (page bytes / restore time, caches dropped
//     first);
//   - each with vessel doing the page writes (--snapshot-io vessel: O_DIRECT
//     1 MiB writes, 4 in flight) and with CRIU doing them alone
//     (--snapshot-io criu: buffered writes, then fsync); restore is CRIU's
//     own reads in both (the two restore columns are a noise gauge);
//   - the memory written after the thaw (--snapshot-memory background, the
//     default: modes "vessel" and "criu") or all of it while frozen
//     ("vessel-frozen", "criu-frozen"); for the background modes the time
//     the write took after the thaw and its rate (page bytes / that time)
//     too. The idle container (S = 0) is the same-run floor of the frozen
//     time;
//   - fio's O_DIRECT 1 MiB sequential write and read of a file in the same
//     pool (a NODATASUM directory, as the checkpoint volumes), interleaved with the runs above (once a round), and each
//     restore's rate over its own round's fio read (restore_vs_raw_per_run:
//     its min is the "every run" figure), and over the mean of that read
//     and a second fio read right after the restore
//     (restore_vs_bracket_per_run; raw_read_drift_per_run is how far the
//     second read is from the first); after each round's read, the rate at
//     which the machine gives a process fresh memory (first_touch_mb_s),
//     which a restore pays and fio's read does not.
//
// It prints JSON (medians over -n runs). With -criu-b, every run of a mode
// is done twice in a row, with the default criu and with the one given
// (mode MODE@b): a same-run A/B of a CRIU change. With VESSEL_KEEP_LOGS=DIR
// the daemon's log and CRIU's log of every dump and restore are kept there
// (NAME-SNAP-dump.log, NAME-SNAP-restore.log).
//
//	go run ./bench/snapshot -n 5 -sizes 0,256,1024
//	go run ./bench/snapshot -n 10 -sizes 1024 -modes vessel,vessel-frozen -criu-b /path/to/other/criu
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark string            `json:"benchmark"`
	Machine   benchutil.Machine `json:"machine"`
	N         int               `json:"n"`
	// Raw is fio on a file in the pool: MB/s (10^6 bytes).
	Raw struct {
		WriteMBps benchutil.Stats `json:"write_mb_s"`
		ReadMBps  benchutil.Stats `json:"read_mb_s"`
		Command   string          `json:"command"`
		// FirstTouchMBps is the rate at which this machine gives a
		// process fresh memory, taken right after each fio read
		// (benchutil.FirstTouch of the same size): a restore fills that
		// much new memory while it reads, fio's read does not.
		FirstTouchMBps benchutil.Stats `json:"first_touch_mb_s"`
	} `json:"raw_fio"`
	DiskOnly struct {
		FrozenMs benchutil.Stats `json:"frozen_ms"`
		TotalMs  benchutil.Stats `json:"total_ms"`
	} `json:"disk_snapshot"`
	Stateful  []SizeResult       `json:"stateful"`
	Reference map[string]float64 `json:"reference"`
}

// SizeResult is one memory size, for each I/O mode.
type SizeResult struct {
	RSSMiB int `json:"rss_mib"`
	// Security is "unprivileged" (the default) or "privileged".
	Security string                `json:"security"`
	Modes    map[string]ModeResult `json:"modes"`
}

// ModeResult is the stateful snapshot and restore of one size in one mode.
type ModeResult struct {
	PageBytes  uint64          `json:"page_bytes"`
	FrozenMs   benchutil.Stats `json:"frozen_ms"`
	SnapshotMs benchutil.Stats `json:"snapshot_total_ms"`
	DumpMs     benchutil.Stats `json:"dump_ms"`
	SyncMs     benchutil.Stats `json:"sync_after_thaw_ms"`
	// Memory is when the memory was written ("background": after the
	// thaw; "frozen"); WriteAfterThawMs the background write's time and
	// AfterThawMBps its rate (page bytes / that time). WriteMBps is page
	// bytes / the time from the dump's start until they are durable.
	Memory           string          `json:"memory"`
	WriteAfterThawMs benchutil.Stats `json:"write_after_thaw_ms"`
	AfterThawMBps    benchutil.Stats `json:"after_thaw_write_mb_s"`
	WriteMBps        benchutil.Stats `json:"write_mb_s"`
	RestoreMs        benchutil.Stats `json:"restore_ms"`
	// RestoreOpMs is the whole restore operation as the client sees it:
	// the old container's stop, the disk's rollback and the restore
	// (RestoreMs is the daemon's clock from the disk rolled back on).
	RestoreOpMs benchutil.Stats `json:"restore_op_ms"`
	RestoreMBps benchutil.Stats `json:"restore_mb_s"`
	// RestoreVsRawPerRun is each run's restore rate over the fio read of
	// its own round (taken just before it, on the same pool): the disk's
	// speed changes from minute to minute on a shared machine, so this,
	// and its Min above all ("every run"), is the restore's own figure.
	RestoreVsRawPerRun benchutil.Stats `json:"restore_vs_raw_per_run"`
	// RestoreVsBracketPerRun is each run's restore rate over the mean of
	// that fio read and a second one taken right after the restore (the
	// raw read bracketing the restore); RawReadDriftPerRun is the second
	// read over the first: how far the baseline itself moves within one
	// run, which bounds how exactly "every run" can be judged.
	RestoreVsBracketPerRun benchutil.Stats `json:"restore_vs_bracket_per_run"`
	RawReadDriftPerRun     benchutil.Stats `json:"raw_read_drift_per_run"`
	// AfterThawVsRawPerRun and WriteVsRawPerRun: each run's background
	// write rate (after the thaw; from the dump's start until durable)
	// over its own round's fio write.
	AfterThawVsRawPerRun benchutil.Stats `json:"after_thaw_vs_raw_write_per_run"`
	WriteVsRawPerRun     benchutil.Stats `json:"write_vs_raw_write_per_run"`
	// Ratios of the medians to the raw fio medians.
	WriteVsRaw     float64 `json:"write_vs_raw"`
	AfterThawVsRaw float64 `json:"after_thaw_write_vs_raw"`
	RestoreVsRaw   float64 `json:"restore_vs_raw"`
}

func main() {
	n := flag.Int("n", 5, "runs per size and mode")
	sizesFlag := flag.String("sizes", "0,256,1024", "MiB of dirty memory per container (0: idle busybox)")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	secFlag := flag.String("security", "unprivileged", "container kinds, in turn: unprivileged, privileged (both: a same-run column)")
	modesFlag := flag.String("modes", "vessel,criu,vessel-frozen", "who writes the pages (vessel, criu), -frozen: all of the memory while frozen")
	criuB := flag.String("criu-b", "", "a second criu binary: every run of a mode is done with the default criu and then with this one (mode MODE@b), a same-run A/B")
	flag.Parse()
	modes := strings.Split(*modesFlag, ",")
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -sizes:", err)
			os.Exit(2)
		}
		sizes = append(sizes, v)
	}

	r, bin := benchutil.Start()
	defer r.Close()
	memhog := filepath.Join(bin, "memhog")
	if err := testhost.BuildMemhog(memhog); err != nil {
		r.Fatalf("%v", err)
	}
	h := testhost.New(r, bin, testhost.Options{StorageSizeMiB: 12 << 10})
	// fio reads and writes where the images go: a NODATASUM directory, as
	// the daemon makes each checkpoint volume (the pool's own directories
	// are checksummed: btrfs verifies every block it reads and serves
	// O_DIRECT writes to them buffered).
	fioDir := filepath.Join(h.PoolPath(), "fio")
	if _, err := storage.PrepareNoDataSumDir(fioDir); err != nil {
		r.Fatalf("%v", err)
	}
	r.Cleanup(func() { os.RemoveAll(fioDir) })
	b := &bench{r: r, h: h, c: h.Client(), memhog: memhog, criuB: *criuB, fioDir: fioDir}

	var res Result
	res.Benchmark, res.Machine, res.N = "snapshot", benchutil.ThisMachine(), *n
	res.Raw.Command = strings.Join(benchutil.FioArgs("write", "POOL/fio/fio.dat", fioMiB), " ")

	b.diskOnly(&res, 10)
	for _, sec := range strings.Split(*secFlag, ",") {
		for _, size := range sizes {
			sr := SizeResult{RSSMiB: size, Security: sec, Modes: map[string]ModeResult{}}
			name := fmt.Sprintf("m%d", size)
			switch sec {
			case "unprivileged":
				h.OK("launch", "busybox", name)
			case "privileged":
				name += "p"
				h.OK("launch", "busybox", name, "-c", "security.privileged=true")
			default:
				r.Fatalf("bad -security %q", sec)
			}
			if size > 0 {
				h.StartMemhog(name, memhog, size)
			}
			for _, mode := range modes {
				maps.Copy(sr.Modes, b.stateful(name, mode, *n, size > 0))
			}
			h.OK("delete", "--force", name)
			res.Stateful = append(res.Stateful, sr)
		}
	}
	res.Raw.WriteMBps = benchutil.Summarise(b.rawWrite)
	res.Raw.ReadMBps = benchutil.Summarise(b.rawRead)
	res.Raw.FirstTouchMBps = benchutil.Summarise(b.touch)
	for _, sr := range res.Stateful {
		for mode, mr := range sr.Modes {
			mr.WriteVsRaw = benchutil.Ratio(mr.WriteMBps.Median, res.Raw.WriteMBps.Median)
			mr.AfterThawVsRaw = benchutil.Ratio(mr.AfterThawMBps.Median, res.Raw.WriteMBps.Median)
			mr.RestoreVsRaw = benchutil.Ratio(mr.RestoreMBps.Median, res.Raw.ReadMBps.Median)
			sr.Modes[mode] = mr
		}
	}
	res.Reference = map[string]float64{
		"incus_stateful_snapshot_ms": 357,
		"incus_stateful_restore_ms":  949,
	}
	benchutil.Emit(r, res, *out)
}

type bench struct {
	r       *testhost.Runner
	h       *testhost.Host
	c       *client.Client
	memhog  string
	criuB   string // -criu-b
	fioDir  string // where fio's file goes
	rawRead []float64
	// rawWrite and rawRead collect fio samples interleaved with the runs,
	// touch the first-touch rate after each read.
	rawWrite []float64
	touch    []float64
}

// setMode restarts the daemon with --snapshot-io io and --snapshot-memory
// of mode "io" (background) or "io-frozen" (containers keep running across
// the restart), and with --criu criu if that is set.
func (b *bench) setMode(mode, criu string) {
	io, frozen := strings.CutSuffix(mode, "-frozen")
	memory := "background"
	if frozen {
		memory = "frozen"
	}
	if io != "vessel" && io != "criu" {
		b.r.Fatalf("bad mode %q", mode)
	}
	args := []string{"--snapshot-io", io, "--snapshot-memory", memory}
	if criu != "" {
		args = append(args, "--criu", criu)
	}
	b.h.SetExtraArgs(args...)
	b.h.RestartDaemon()
}

// diskOnly takes k disk snapshots of a running container.
func (b *bench) diskOnly(res *Result, k int) {
	b.h.OK("launch", "busybox", "disk")
	var frozen, total []float64
	for i := 0; i < k; i++ {
		snap := fmt.Sprintf("d%d", i)
		t0 := time.Now()
		b.h.OK("snapshot", "create", "disk", snap)
		total = append(total, benchutil.Ms(time.Since(t0)))
		s, err := b.c.Snapshot(context.Background(), "disk", snap)
		if err != nil {
			b.r.Fatalf("%v", err)
		}
		frozen = append(frozen, s.FrozenMs)
	}
	b.h.OK("delete", "--force", "disk")
	res.DiskOnly.FrozenMs = benchutil.Summarise(frozen)
	res.DiskOnly.TotalMs = benchutil.Summarise(total)
}

// samples are one variant's measurements of a mode.
type samples struct {
	mr                                                             ModeResult
	frozen, total, dump, sync, wrate, restore, rrate, after, arate []float64
	restoreOp                                                      []float64
	rratio, aratio, wratio, bratio, drift                          []float64
}

// stateful runs n stateful snapshots and restores of container name in
// mode, and with -criu-b each of them again with that criu right after
// (results MODE and MODE@b).
func (b *bench) stateful(name, mode string, n int, memhog bool) map[string]ModeResult {
	variants := map[string]string{mode: ""}
	order := []string{mode}
	if b.criuB != "" {
		variants[mode+"@b"] = b.criuB
		order = append(order, mode+"@b")
	} else {
		b.setMode(mode, "")
	}
	got := map[string]*samples{}
	for i := 0; i < n; i++ {
		b.fio()
		if b.criuB != "" {
			// Alternate which build goes first after the round's fio.
			slices.Reverse(order)
		}
		for _, v := range order {
			if b.criuB != "" {
				b.setMode(mode, variants[v])
			}
			if got[v] == nil {
				got[v] = &samples{}
			}
			b.statefulOnce(name, v, mode, i, memhog, got[v])
		}
	}
	res := map[string]ModeResult{}
	for v, s := range got {
		res[v] = s.summarise()
	}
	return res
}

// statefulOnce takes snapshot i of name (variant v of mode) and restores it.
func (b *bench) statefulOnce(name, v, mode string, i int, memhog bool, s *samples) {
	ctx := context.Background()
	mr := &s.mr
	snap := fmt.Sprintf("%s%d", strings.ReplaceAll(v, "@", "-"), i)
	t0 := time.Now()
	op, err := b.c.CreateSnapshot(ctx, name, api.SnapshotsPost{Name: snap, Stateful: true})
	if err == nil {
		err = op.Wait(ctx, nil)
	}
	if err != nil {
		b.r.Fatalf("stateful snapshot of %s (%s): %v", name, mode, err)
	}
	s.total = append(s.total, benchutil.Ms(time.Since(t0)))
	b.keepCRIULog(name, "dump", snap)
	md := op.Metadata
	mr.PageBytes = uint64(num(md["page_bytes"]))
	s.frozen = append(s.frozen, num(md[api.MetaFrozenMs]))
	s.dump = append(s.dump, num(md["dump_ms"]))
	s.sync = append(s.sync, num(md["sync_ms"]))
	mr.Memory, _ = md["memory"].(string)
	// Durable at the end of the dump's write (vessel's writer syncs),
	// or only after the fsync that follows (CRIU's buffered writes).
	durable := num(md["dump_ms"]) + num(md["write_ms"])
	if strings.HasPrefix(mode, "criu") {
		durable += num(md["sync_ms"])
	}
	s.wrate = append(s.wrate, mbps(mr.PageBytes, durable))
	rawW := b.rawWrite[len(b.rawWrite)-1] // this round's
	s.wratio = append(s.wratio, mbps(mr.PageBytes, durable)/rawW)
	if mr.Memory == "background" {
		w := num(md["write_ms"])
		if strings.HasPrefix(mode, "criu") {
			w += num(md["sync_ms"])
		}
		s.after = append(s.after, w)
		s.arate = append(s.arate, mbps(mr.PageBytes, w))
		s.aratio = append(s.aratio, mbps(mr.PageBytes, w)/rawW)
	}

	benchutil.DropCaches(b.r)
	t0 = time.Now()
	op, err = b.c.RestoreSnapshot(ctx, name, snap, api.SnapshotRestorePost{Stateful: true, Force: true})
	if err == nil {
		err = op.Wait(ctx, nil)
	}
	if err != nil {
		b.r.Fatalf("stateful restore of %s (%s): %v", name, mode, err)
	}
	s.restoreOp = append(s.restoreOp, benchutil.Ms(time.Since(t0)))
	b.keepCRIULog(name, "restore", snap)
	rms := num(op.Metadata["restore_ms"])
	s.restore = append(s.restore, rms)
	s.rrate = append(s.rrate, mbps(mr.PageBytes, rms))
	raw := b.rawRead[len(b.rawRead)-1] // this round's (stateful calls fio first)
	s.rratio = append(s.rratio, benchutil.Ratio(s.rrate[i], raw))
	rawAfter := benchutil.RawRead(b.r, b.fioDir, fioMiB)
	s.bratio = append(s.bratio, benchutil.Ratio(s.rrate[i], (raw+rawAfter)/2))
	s.drift = append(s.drift, benchutil.Ratio(rawAfter, raw))
	if memhog {
		b.h.OK("exec", name, "--", "pidof", "memhog") // it came back
	}
	b.h.OK("snapshot", "delete", name, snap)
	after := ""
	if mr.Memory == "background" {
		after = fmt.Sprintf(" (after the thaw %.0f MB/s = %.2f x this round's fio write)", s.arate[len(s.arate)-1], s.aratio[len(s.aratio)-1])
	}
	b.r.Logf("%s %s: frozen %.0f ms, dump %.0f ms, memory %s, write %.0f MB/s%s, restore %.0f ms (%.0f MB/s = %.2f x this round's fio read, %.2f x it and the read after; first touch %.0f MB/s; the whole operation %.0f ms)",
		name, v, s.frozen[i], s.dump[i], mr.Memory, s.wrate[i], after, rms, s.rrate[i], s.rratio[i], s.bratio[i], b.touch[len(b.touch)-1], s.restoreOp[i])
}

// keepCRIULog copies CRIU's log of the dump or restore (step) that made
// or restored snap of container name into $VESSEL_KEEP_LOGS as
// NAME-SNAP-STEP.log, where it is set: the daemon keeps only the last one
// (its work directory, RUN/criu/NAME/STEP), and per-run breakdowns of the
// frozen dump and of the restore need each (scripts/criu-log-profile.py).
func (b *bench) keepCRIULog(name, step, snap string) {
	dir := os.Getenv(testhost.KeepLogsEnv)
	if dir == "" {
		return
	}
	src := filepath.Join(b.h.RunDir(), "criu", name, step, step+".log")
	data, err := os.ReadFile(src)
	if err != nil {
		b.r.Logf("keep %s: %v", src, err)
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.r.Logf("keep %s: %v", src, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-%s.log", name, snap, step)), data, 0o600); err != nil {
		b.r.Logf("keep %s: %v", src, err)
	}
}

func (s *samples) summarise() ModeResult {
	mr := s.mr
	mr.FrozenMs = benchutil.Summarise(s.frozen)
	mr.SnapshotMs = benchutil.Summarise(s.total)
	mr.DumpMs = benchutil.Summarise(s.dump)
	mr.SyncMs = benchutil.Summarise(s.sync)
	mr.WriteMBps = benchutil.Summarise(s.wrate)
	if len(s.after) > 0 {
		mr.WriteAfterThawMs = benchutil.Summarise(s.after)
		mr.AfterThawMBps = benchutil.Summarise(s.arate)
	}
	mr.RestoreMs = benchutil.Summarise(s.restore)
	mr.RestoreOpMs = benchutil.Summarise(s.restoreOp)
	mr.RestoreMBps = benchutil.Summarise(s.rrate)
	mr.RestoreVsRawPerRun = benchutil.Summarise(s.rratio)
	mr.RestoreVsBracketPerRun = benchutil.Summarise(s.bratio)
	mr.RawReadDriftPerRun = benchutil.Summarise(s.drift)
	mr.WriteVsRawPerRun = benchutil.Summarise(s.wratio)
	if len(s.aratio) > 0 {
		mr.AfterThawVsRawPerRun = benchutil.Summarise(s.aratio)
	}
	return mr
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func mbps(bytes uint64, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / (ms / 1000)
}

// fioMiB is the size of the raw baseline's file.
const fioMiB = 1024

// fio measures the pool's raw sequential write and (cold) read once.
func (b *bench) fio() {
	w, r := benchutil.RawDisk(b.r, b.fioDir, fioMiB)
	b.rawWrite = append(b.rawWrite, w)
	b.rawRead = append(b.rawRead, r)
	b.touch = append(b.touch, benchutil.FirstTouch(b.r, fioMiB))
}
