package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/testhost"
)

// APIResult is one guest size's stateful snapshot and restore of a VM
// through vessel's API (-api-sizes): `vessel launch busybox --vm`,
// memhog holding the guest's memory, then `snapshot create --stateful`
// (live mapped-ram save into the pool's checkpoint volume, disk snapshot
// at the end) and `snapshot restore --stateful --force` (new QEMU, load),
// each run checked by memhog's own verification of its memory after the
// restore. The same run's fio on the daemon's btrfs pool (in a NODATASUM
// directory, as the state files) is beside it.
type APIResult struct {
	// Name is the VM's.
	Name      string `json:"name"`
	GuestMiB  int    `json:"guest_mib"`
	MemhogMiB int    `json:"memhog_mib"`
	Raw       struct {
		WriteMBps benchutil.Stats `json:"write_mb_s"`
		ReadMBps  benchutil.Stats `json:"read_mb_s"`
	} `json:"raw_fio"`
	// SaveMBps is the RAM QEMU wrote (all passes) per second of the live
	// save; LoadMBps the state file's size per second of the load.
	SaveMBps benchutil.Stats `json:"save_mb_s"`
	LoadMBps benchutil.Stats `json:"load_mb_s"`
	// SnapshotS and RestoreS are the whole operations as a client sees
	// them; FrozenMs the vCPUs' stop; Passes QEMU's passes over RAM.
	SnapshotS benchutil.Stats `json:"snapshot_s"`
	RestoreS  benchutil.Stats `json:"restore_s"`
	FrozenMs  benchutil.Stats `json:"frozen_ms"`
	Passes    benchutil.Stats `json:"passes"`
	SaveOfRaw float64         `json:"save_of_raw"`
	LoadOfRaw float64         `json:"load_of_raw"`
	// LoadOfRawPerRun is each load's rate over the fio read of its own
	// round (taken just before it): its min is the "every run" figure.
	LoadOfRawPerRun benchutil.Stats `json:"load_of_raw_per_run"`
	FileBytes       int64           `json:"file_bytes"`
	NoDataSum       bool            `json:"nodatasum"`
	Verified        bool            `json:"memhog_verified"`
	// RestoreTHP: the daemon ran with --vm-restore-thp (the restore's
	// QEMU kept transparent huge pages; by default it has them off).
	RestoreTHP bool `json:"restore_thp"`
	// RAMKeptMiB is, per restore, the RAM the VM's previous QEMU left in
	// its RAM file for the new one (0: loaded into fresh RAM, as with
	// vesseld --vm-anonymous-ram); RAMPunchedMiB what of it was punched
	// out (pages the state file does not hold).
	RAMKeptMiB    benchutil.Stats `json:"ram_kept_mib"`
	RAMPunchedMiB benchutil.Stats `json:"ram_punched_mib"`
	// RAMSmallPages: the daemon ran with --vm-ram-small-pages (the RAM
	// files' tmpfs huge=never instead of huge=advise).
	RAMSmallPages bool `json:"ram_small_pages"`
	// SaveOfRawPerRun is each save's rate over its round's fio write;
	// LoadOfRawBracketPerRun each load's rate over the mean of its
	// round's fio read and a second one right after the restore.
	SaveOfRawPerRun        benchutil.Stats `json:"save_of_raw_per_run"`
	LoadOfRawBracketPerRun benchutil.Stats `json:"load_of_raw_bracket_per_run"`
	// Runs are the rounds one by one: where each load's time went.
	Runs []APIRun `json:"runs"`
}

// APIRun is one round of an API row.
type APIRun struct {
	FioWriteMBps     float64 `json:"fio_write_mb_s"`
	FioReadMBps      float64 `json:"fio_read_mb_s"`
	FioReadAfterMBps float64 `json:"fio_read_after_mb_s"`
	SaveMBps         float64 `json:"save_mb_s"`
	SaveOfRaw        float64 `json:"save_of_raw"`
	// SyncMs is the fsync of the state file after the cont (not in
	// save_ms); SaveDurableMBps the RAM written per second of both, the
	// way fio's write counts its end_fsync.
	SyncMs           float64 `json:"sync_ms"`
	SaveDurableMBps  float64 `json:"save_durable_mb_s"`
	SaveDurableOfRaw float64 `json:"save_durable_of_raw"`
	// FrozenMs is the snapshot's frozen time (QEMU's stop to the cont),
	// DowntimeMs QEMU's part of it (the last pass and the device state);
	// the rest is the disk's snapshot and the cont.
	FrozenMs   float64 `json:"frozen_ms"`
	DowntimeMs float64 `json:"downtime_ms"`
	// LoadMs is the daemon's load_ms: PrepareMs (the RAM file's punch),
	// PreallocMs (QEMU's populate) and the migration itself (MigrateMs).
	LoadMs         float64 `json:"load_ms"`
	PrepareMs      float64 `json:"prepare_ms"`
	PreallocMs     float64 `json:"prealloc_ms"`
	MigrateMs      float64 `json:"migrate_ms"`
	LoadMBps       float64 `json:"load_mb_s"`
	LoadOfRaw      float64 `json:"load_of_raw"`
	LoadOfRawBrack float64 `json:"load_of_raw_bracket"`
	RestoreS       float64 `json:"restore_s"`
	KeptMiB        float64 `json:"ram_kept_mib"`
	PunchedMiB     float64 `json:"ram_punched_mib"`
	LoadAvg        string  `json:"loadavg"`
	ShmemHugeMiB   float64 `json:"shmem_huge_mib"`
}

// apiBench runs the API rows: one daemon (testhost, its own btrfs pool),
// one VM per size, n snapshot/restore rounds each. With abSmallPages each
// size has two VMs, one booted while the RAM tmpfs was remounted
// huge=never (its RAM file in small pages, as --vm-ram-small-pages gives
// every VM) and one with huge=advise, and every round restores both,
// which goes first alternating, the tmpfs remounted to the arm's option
// before each (the restore faults the punched pages anew): an A/B in one
// slot, on one pool, with its own fio rounds.
func apiBench(r *testhost.Runner, sizes []int, n int, restoreTHP, smallPages, abSmallPages bool) []APIResult {
	bin := benchutil.Bin(r)
	memhog := filepath.Join(bin, "memhog")
	if err := testhost.BuildMemhog(memhog); err != nil {
		r.Fatalf("%v", err)
	}
	maxMiB := 0
	for _, s := range sizes {
		maxMiB = max(maxMiB, s)
	}
	opts := testhost.Options{StorageSizeMiB: 3*maxMiB + 8<<10}
	if restoreTHP {
		opts.ExtraArgs = append(opts.ExtraArgs, "--vm-restore-thp")
	}
	if smallPages {
		opts.ExtraArgs = append(opts.ExtraArgs, "--vm-ram-small-pages")
	}
	h := testhost.New(r, bin, opts)
	// fio writes where the state files go: a NODATASUM directory (the
	// pool's own directories are checksummed, and btrfs serves O_DIRECT
	// to checksummed files buffered).
	fioDir := filepath.Join(h.PoolPath(), "fio")
	if _, err := storage.PrepareNoDataSumDir(fioDir); err != nil {
		r.Fatalf("%v", err)
	}
	r.Cleanup(func() { os.RemoveAll(fioDir) })
	var out []APIResult
	for _, mib := range sizes {
		arms := []*apiArm{{name: fmt.Sprintf("vm%d", mib), small: smallPages}}
		if abSmallPages {
			arms = []*apiArm{{name: fmt.Sprintf("vm%ds", mib), small: true}, {name: fmt.Sprintf("vm%dh", mib), small: false}}
		}
		for _, a := range arms {
			a.res = APIResult{GuestMiB: mib, MemhogMiB: mib - max(192, mib/16), Verified: true, RestoreTHP: restoreTHP, RAMSmallPages: a.small}
			if abSmallPages {
				remountVMRAM(r, h, a.small)
			}
			launchMemhogVM(r, h, memhog, a.name, mib, a.res.MemhogMiB)
		}
		for i := range n {
			for j := range arms {
				a := arms[(i+j)%len(arms)]
				if abSmallPages {
					// The restore's QEMU faults the punched pages in
					// anew: in the arm's page size.
					remountVMRAM(r, h, a.small)
				}
				a.runs = append(a.runs, apiRound(r, h, fioDir, a.name, mib, len(a.runs), &a.res))
			}
		}
		for _, a := range arms {
			h.OK("delete", "--force", a.name)
			out = append(out, a.summarise())
		}
	}
	return out
}

// apiArm is one VM of an API row and its rounds.
type apiArm struct {
	name  string
	small bool
	res   APIResult
	runs  []apiRoundResult
}

// apiRoundResult is one round's figures, before they are summarised.
type apiRoundResult struct {
	APIRun
	snapS, frozen, passes float64
}

// remountVMRAM remounts the daemon's RAM tmpfs huge=never (small) or
// huge=advise, for the VM launched next: a file keeps the page size it
// was faulted in with.
func remountVMRAM(r *testhost.Runner, h *testhost.Host, small bool) {
	huge := "huge=advise"
	if small {
		huge = "huge=never"
	}
	dir := filepath.Join(h.RunDir(), "vm-ram")
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, huge); err != nil {
		r.Fatalf("remount %s %s: %v", dir, huge, err)
	}
}

// launchMemhogVM launches a VM of mib MiB and fills memhogMiB of its
// memory with memhog.
func launchMemhogVM(r *testhost.Runner, h *testhost.Host, memhog, name string, mib, memhogMiB int) {
	h.OK("launch", "busybox", name, "--vm", "-c", "limits.cpu=2", "-c", fmt.Sprintf("limits.memory=%dMiB", mib))
	h.OK("file", "push", "--mode", "0755", memhog, name+"/root/memhog")
	t0 := time.Now()
	h.OK("exec", name, "--", "sh", "-c", fmt.Sprintf("setsid /root/memhog %d /root/memhog.ready </dev/null >/dev/null 2>&1 &", memhogMiB))
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /root/memhog.ready ]; do sleep 0.2; done")
	r.Logf("api %s: memhog filled %d MiB in %s; shmem huge pages %.0f MiB", name, memhogMiB, time.Since(t0).Round(time.Second), shmemHugeMiB())
}

// apiRound is one round: fio on the pool, the VM's stateful snapshot, its
// restore, a second fio read, memhog's check of its memory.
func apiRound(r *testhost.Runner, h *testhost.Host, fioDir, name string, mib, i int, res *APIResult) apiRoundResult {
	c := h.Client()
	ctx := context.Background()
	fw, fr := benchutil.RawDisk(r, fioDir, mib)
	snap := fmt.Sprintf("s%d", i)
	ts := time.Now()
	op, err := c.CreateSnapshot(ctx, name, api.SnapshotsPost{Name: snap, Stateful: true})
	if err == nil {
		err = op.Wait(ctx, nil)
	}
	if err != nil {
		r.Fatalf("stateful snapshot of %s: %v", name, err)
	}
	var rr apiRoundResult
	rr.snapS = time.Since(ts).Seconds()
	md := op.Metadata
	rr.SaveMBps = mbps(num(md["ram_bytes"]), num(md["save_ms"]))
	rr.SyncMs = num(md["sync_ms"])
	rr.FrozenMs, rr.DowntimeMs = num(md[api.MetaFrozenMs]), num(md["downtime_ms"])
	rr.SaveDurableMBps = mbps(num(md["ram_bytes"]), num(md["save_ms"])+rr.SyncMs)
	rr.frozen = num(md[api.MetaFrozenMs])
	rr.passes = num(md["passes"])
	res.FileBytes = int64(num(md["file_bytes"]))
	res.NoDataSum, _ = md["nodatasum"].(bool)
	benchutil.DropCaches(r)
	tr := time.Now()
	op, err = c.RestoreSnapshot(ctx, name, snap, api.SnapshotRestorePost{Stateful: true, Force: true})
	if err == nil {
		err = op.Wait(ctx, nil)
	}
	if err != nil {
		r.Fatalf("stateful restore of %s: %v", name, err)
	}
	rr.RestoreS = time.Since(tr).Seconds()
	rr.LoadAvg = loadavg()
	rr.ShmemHugeMiB = shmemHugeMiB()
	md = op.Metadata
	// load_ms includes the RAM file's punch and QEMU populating the RAM
	// first (prealloc_ms).
	rr.LoadMs, rr.PrepareMs, rr.PreallocMs = num(md["load_ms"]), num(md["ram_prepare_ms"]), num(md["prealloc_ms"])
	rr.MigrateMs = rr.LoadMs - rr.PrepareMs - rr.PreallocMs
	rr.LoadMBps = mbps(num(md["file_bytes"]), rr.LoadMs)
	rr.KeptMiB, rr.PunchedMiB = num(md["ram_kept_bytes"])/(1<<20), num(md["ram_punched_bytes"])/(1<<20)
	// The second sample of the raw read, right after the load.
	fa := benchutil.RawRead(r, fioDir, mib)
	rr.FioWriteMBps, rr.FioReadMBps, rr.FioReadAfterMBps = fw, fr, fa
	rr.SaveOfRaw = benchutil.Ratio(rr.SaveMBps, fw)
	rr.SaveDurableOfRaw = benchutil.Ratio(rr.SaveDurableMBps, fw)
	rr.LoadOfRaw = benchutil.Ratio(rr.LoadMBps, fr)
	rr.LoadOfRawBrack = benchutil.Ratio(rr.LoadMBps, (fr+fa)/2)
	v := h.OK("exec", name, "--", "sh", "-c",
		"rm -f /root/memhog.ready.verify; kill -USR1 $(pidof memhog) && while [ ! -e /root/memhog.ready.verify ]; do sleep 0.2; done; cat /root/memhog.ready.verify")
	if strings.TrimSpace(v) != "ok" {
		res.Verified = false
		r.Errorf("%s after restore %d: memhog says %q", name, i, v)
	}
	h.OK("snapshot", "delete", name, snap)
	r.Logf("api %s run %d: snapshot %.2fs (save %.0f MB/s = %.2f x fio write, %v passes, frozen %.0f ms), restore %.2fs: load %.0f ms = prepare %.0f + prealloc %.0f + migrate %.0f (%.0f MB/s = %.2f x fio read, %.2f x bracket), ram kept %.0f MiB (punched %.0f), fio w/r/r %.0f/%.0f/%.0f MB/s, loadavg %s, shmem huge %.0f MiB, memhog %s",
		name, i, rr.snapS, rr.SaveMBps, rr.SaveOfRaw, rr.passes, rr.frozen, rr.RestoreS, rr.LoadMs, rr.PrepareMs, rr.PreallocMs, rr.MigrateMs,
		rr.LoadMBps, rr.LoadOfRaw, rr.LoadOfRawBrack, rr.KeptMiB, rr.PunchedMiB, fw, fr, fa, rr.LoadAvg, rr.ShmemHugeMiB, strings.TrimSpace(v))
	return rr
}

// summarise fills the arm's result from its rounds.
func (a *apiArm) summarise() APIResult {
	res := a.res
	pick := func(f func(apiRoundResult) float64) benchutil.Stats {
		var v []float64
		for _, rr := range a.runs {
			v = append(v, f(rr))
		}
		return benchutil.Summarise(v)
	}
	res.Raw.WriteMBps = pick(func(rr apiRoundResult) float64 { return rr.FioWriteMBps })
	res.Raw.ReadMBps = pick(func(rr apiRoundResult) float64 { return rr.FioReadMBps })
	res.SaveMBps = pick(func(rr apiRoundResult) float64 { return rr.SaveMBps })
	res.LoadMBps = pick(func(rr apiRoundResult) float64 { return rr.LoadMBps })
	res.SnapshotS = pick(func(rr apiRoundResult) float64 { return rr.snapS })
	res.RestoreS = pick(func(rr apiRoundResult) float64 { return rr.RestoreS })
	res.FrozenMs = pick(func(rr apiRoundResult) float64 { return rr.frozen })
	res.Passes = pick(func(rr apiRoundResult) float64 { return rr.passes })
	res.RAMKeptMiB = pick(func(rr apiRoundResult) float64 { return rr.KeptMiB })
	res.RAMPunchedMiB = pick(func(rr apiRoundResult) float64 { return rr.PunchedMiB })
	res.LoadOfRawPerRun = pick(func(rr apiRoundResult) float64 { return rr.LoadOfRaw })
	res.SaveOfRawPerRun = pick(func(rr apiRoundResult) float64 { return rr.SaveOfRaw })
	res.LoadOfRawBracketPerRun = pick(func(rr apiRoundResult) float64 { return rr.LoadOfRawBrack })
	res.SaveOfRaw = benchutil.Ratio(res.SaveMBps.Median, res.Raw.WriteMBps.Median)
	res.LoadOfRaw = benchutil.Ratio(res.LoadMBps.Median, res.Raw.ReadMBps.Median)
	for _, rr := range a.runs {
		res.Runs = append(res.Runs, rr.APIRun)
	}
	res.Name = a.name
	return res
}

// shmemHugeMiB is the host's shmem in huge pages (/proc/meminfo's
// ShmemHugePages): whether the VMs' RAM files have them.
func shmemHugeMiB() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "ShmemHugePages:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// num reads a number from an operation's metadata (JSON: float64).
func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

// mbps is 10^6 bytes per second.
func mbps(bytes, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return bytes / 1e6 / (ms / 1000)
}
