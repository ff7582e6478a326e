// Command vmsnapshot measures saving and loading a VM's memory and device
// state to a file on a pool, against the raw bandwidth of the same pool
// measured in the same run. For each pool (a btrfs pool on a loop device
// made the way vessel makes its own, and the root filesystem) and each
// guest memory size it repeats -n times:
//
//   - fio O_DIRECT 1 MiB iodepth 8 sequential write, then (caches dropped)
//     read, of a file the size of the guest's memory, in the state
//     directory;
//   - boots the memfill guest (Debian's cloud kernel, an initramfs whose
//     init fills all but 128 MiB of the guest's memory with incompressible
//     bytes), then saves its state with: the legacy savevm (HMP, into a
//     qcow2 drive), QEMU's mapped-ram + multifd + direct-io to a file
//     (internal/qemu.Save, what vessel uses), the plain single-stream file:
//     migration, and the same stream through gzip -c (the Incus/LXD path;
//     only for guests up to -gzip-max MiB and the first -gzip-n runs: it is
//     CPU-bound and slow);
//   - kills the guest and loads each file into a fresh QEMU (caches dropped
//     before each load); on the first run each loaded guest is resumed and
//     its memory checksum compared with the one it had before the save.
//
// Before that, on the btrfs pool (-sweep-pool), it sweeps the multifd channel count
// (-channels) for save and load. MB/s are 10^6 bytes of guest RAM
// transferred (query-migrate's ram.transferred of the mapped-ram save) per
// second of the whole Save/Load call (stop and configuration included,
// QEMU's start excluded; the save's time includes the fsync of the file).
// QEMU runs under TCG here unless -accel says otherwise: the state is
// copied by QEMU's migration threads on the host whatever runs the vCPUs,
// so the figures are about the host's disk path.
//
// With -api-sizes it also runs the stateful snapshot and restore of a VM
// through vessel itself (a vesseld on its own btrfs pool; see APIResult).
//
//	go run ./bench/vmsnapshot -n 3 -sizes 2048,8192 -out /work/benchres13/vmsnapshot.json
//	go run ./bench/vmsnapshot -pools '' -channels '' -api-sizes 2048 -api-n 3
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/vmsnapshot/guest"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark       string            `json:"benchmark"`
	Machine         benchutil.Machine `json:"machine"`
	Accel           string            `json:"accel"`
	QEMU            string            `json:"qemu"`
	N               int               `json:"n"`
	DefaultChannels int               `json:"default_channels"`
	LoadAvgStart    string            `json:"loadavg_start"`
	LoadAvgEnd      string            `json:"loadavg_end"`
	Sweep           *Sweep            `json:"channel_sweep,omitempty"`
	Pools           []PoolResult      `json:"pools"`
	// API is the same save and load through vessel (-api-sizes).
	API []APIResult `json:"api,omitempty"`
}

// Sweep is the multifd channel count sweep.
type Sweep struct {
	Pool     string     `json:"pool"`
	GuestMiB int        `json:"guest_mib"`
	LoadTHP  bool       `json:"load_thp"`
	Rows     []SweepRow `json:"rows"`
}

// SweepRow is one channel count's save and load rates (MB/s).
type SweepRow struct {
	Channels int             `json:"channels"`
	SaveMBps benchutil.Stats `json:"save_mb_s"`
	LoadMBps benchutil.Stats `json:"load_mb_s"`
	// FaultMBps is the page-fault floor measured before each load.
	FaultMBps benchutil.Stats `json:"fault_floor_mb_s"`
}

// PoolResult holds one pool's sizes.
type PoolResult struct {
	Pool      string       `json:"pool"`
	FS        string       `json:"fs"`
	NoDataSum bool         `json:"state_dir_nodatasum"`
	Sizes     []SizeResult `json:"sizes"`
}

// SizeResult holds one guest size's figures.
type SizeResult struct {
	GuestMiB    int   `json:"guest_mib"`
	FilledBytes int64 `json:"guest_filled_bytes"`
	RAMBytes    int64 `json:"ram_bytes_transferred"`
	Raw         struct {
		WriteMBps benchutil.Stats `json:"write_mb_s"`
		ReadMBps  benchutil.Stats `json:"read_mb_s"`
		Command   string          `json:"command"`
	} `json:"raw_fio"`
	// FaultMBps is the rate at which this host gives a process fresh
	// anonymous memory (THP-advised, as QEMU's guest RAM; 2 threads
	// touching every 4 KiB page; guest-size bytes), measured before each
	// round's loads: a load cannot beat it, since QEMU faults the guest's
	// RAM in as it reads it.
	FaultMBps benchutil.Stats `json:"fault_floor_mb_s"`
	Methods   []*MethodResult `json:"methods"`
	// Speedup: the mapped-ram median rate over each other method's.
	Speedup map[string]float64 `json:"mapped_ram_speedup"`
}

// MethodResult is one save/load method's figures.
type MethodResult struct {
	Method   string          `json:"method"`
	SaveMBps benchutil.Stats `json:"save_mb_s"`
	LoadMBps benchutil.Stats `json:"load_mb_s"`
	SaveS    benchutil.Stats `json:"save_s"`
	LoadS    benchutil.Stats `json:"load_s"`
	// RestoreS is QEMU's start plus the load (what a restore costs).
	RestoreS benchutil.Stats `json:"restore_s"`
	// Ratios of the median rates to fio's median write (save) and read
	// (load) rates of the same run.
	SaveOfRaw float64 `json:"save_of_raw"`
	LoadOfRaw float64 `json:"load_of_raw"`
	// Verified: the loaded guest's memory checksum matched (first run).
	Verified  *bool `json:"verified,omitempty"`
	FileBytes int64 `json:"file_bytes"`
	Channels  int   `json:"channels,omitempty"`
	// THP: the loading QEMU had transparent huge pages (QEMU's default;
	// vessel's restore turns them off, internal/qemu/thp.go).
	THP  bool   `json:"load_thp"`
	Note string `json:"note,omitempty"`
	// loadOf names the method whose file this one loads (a load-only
	// variant: no save of its own).
	loadOf string

	save, load, saveS, loadS, restoreS []float64
}

// mappedRAMTHP is the load-only variant: vessel's mapped-ram file into a
// QEMU with transparent huge pages.
const mappedRAMTHP = "mapped-ram-thp"

type bench struct {
	r        *testhost.Runner
	ctx      context.Context
	cfg      guest.Config
	vm       *guest.VM
	channels int
	smp      int
	faults   []float64
	gzipMax  int
	gzipN    int
	savevm   bool
	loadTHP  bool
	sweepTHP bool
}

func main() {
	if qemu.IsNoTHPLaunch(os.Args) { // guest.Config.NoTHP's launcher
		fmt.Fprintln(os.Stderr, "vmsnapshot:", qemu.ExecNoTHP(os.Args))
		os.Exit(1)
	}
	n := flag.Int("n", 3, "runs per pool and size")
	sizes := flag.String("sizes", "2048,8192", "guest memory sizes, MiB")
	btrfsSizes := flag.String("btrfs-sizes", "", "guest memory sizes on the btrfs pool (default: -sizes)")
	pools := flag.String("pools", "rootfs,btrfs", "pools, in order: rootfs, btrfs (a loop pool)")
	poolSize := flag.String("pool-size", "40G", "size of the btrfs pool's backing file")
	chans := flag.String("channels", "1,2,4,8", "multifd channel counts to sweep (empty: no sweep)")
	sweepN := flag.Int("sweep-n", 3, "runs per channel count")
	sweepMiB := flag.Int("sweep-mib", 2048, "guest size of the sweep")
	sweepPool := flag.String("sweep-pool", "btrfs", "pool the sweep runs on")
	channels := flag.Int("use-channels", 0, "channels of the main runs (0: qemu.DefaultChannels())")
	smp := flag.Int("smp", 2, "guest vCPUs")
	accel := flag.String("accel", "tcg,thread=multi", "QEMU -accel")
	gzipMax := flag.Int("gzip-max", 2048, "largest guest (MiB) the gzip stream runs for")
	gzipN := flag.Int("gzip-n", 2, "runs of the gzip stream")
	savevm := flag.Bool("savevm", true, "include the legacy savevm/loadvm")
	loadTHP := flag.Bool("load-thp", true, "also load the mapped-ram file into a QEMU with transparent huge pages (QEMU's default; vessel's restore and the mapped-ram row have them off)")
	sweepTHP := flag.Bool("sweep-thp", false, "the channel sweep's loads with transparent huge pages")
	work := flag.String("work", "/var/tmp", "directory for the pool file and the root-filesystem state dir")
	out := flag.String("out", "", "also write the JSON here")
	apiSizes := flag.String("api-sizes", "", "guest memory sizes (MiB) of the runs through vessel's API: a VM's `snapshot create/restore --stateful` (empty: none)")
	apiN := flag.Int("api-n", 3, "runs per size through the API")
	apiTHP := flag.Bool("api-restore-thp", false, "run the API's daemon with --vm-restore-thp (restores keep transparent huge pages)")
	apiSmall := flag.Bool("api-ram-small-pages", false, "run the API's daemon with --vm-ram-small-pages (the VMs' RAM files in small pages only)")
	apiAB := flag.Bool("api-ab-small-pages", false, "two VMs per API size, one booted with the RAM tmpfs remounted huge=never (small pages) and one huge=advise; each round restores both, alternating which goes first")
	flag.Parse()

	r := testhost.NewRunner()
	ctx := context.Background()
	wd, err := os.MkdirTemp(*work, "vmsnapshot-")
	if err != nil {
		r.Fatalf("%v", err)
	}
	r.Cleanup(func() { os.RemoveAll(wd) })
	kernel, err := guest.FindKernel()
	if err != nil {
		r.Fatalf("%v", err)
	}
	vmdir := filepath.Join(wd, "vm")
	if err := os.MkdirAll(vmdir, 0o700); err != nil {
		r.Fatalf("%v", err)
	}
	initrd, err := guest.BuildInitramfs(ctx, vmdir)
	if err != nil {
		r.Fatalf("%v", err)
	}
	b := &bench{r: r, ctx: ctx, smp: *smp, gzipMax: *gzipMax, gzipN: *gzipN, savevm: *savevm, loadTHP: *loadTHP, sweepTHP: *sweepTHP,
		cfg: guest.Config{Kernel: kernel, Initrd: initrd, Dir: vmdir, SMP: *smp, Accel: *accel}}
	r.Cleanup(b.killVM)
	b.channels = *channels
	if b.channels == 0 {
		b.channels = qemu.DefaultChannels()
	}
	ver, _ := exec.Command("qemu-system-x86_64", "--version").Output()
	res := Result{Benchmark: "vmsnapshot", Machine: benchutil.ThisMachine(), Accel: *accel, N: *n,
		QEMU: strings.SplitN(string(ver), "\n", 2)[0], DefaultChannels: b.channels, LoadAvgStart: loadavg()}

	// Pools are made one at a time, when their turn comes: the btrfs pool
	// waits for the shared root-tests lock, which other work may hold long.
	for _, name := range strings.Split(*pools, ",") {
		if name == "" {
			continue
		}
		var p pool
		switch name {
		case "btrfs":
			p = btrfsPool(r, wd, *poolSize)
		case "rootfs":
			p = rootPool(r, wd)
		default:
			r.Fatalf("unknown pool %q", name)
		}
		if *chans != "" && name == *sweepPool {
			res.Sweep = b.sweep(p, *sweepMiB, ints(r, *chans), *sweepN)
			r.Logf("sweep: %s", jsonString(res.Sweep))
		}
		pr := PoolResult{Pool: p.Name, FS: p.FS, NoDataSum: p.NoDataSum}
		sz := *sizes
		if name == "btrfs" && *btrfsSizes != "" {
			sz = *btrfsSizes
		}
		for _, mib := range ints(r, sz) {
			sr := b.size(p, mib, *n)
			r.Logf("%s %d MiB: %s", p.Name, mib, jsonString(sr))
			pr.Sizes = append(pr.Sizes, sr)
		}
		res.Pools = append(res.Pools, pr)
	}
	if *apiSizes != "" {
		res.API = apiBench(r, ints(r, *apiSizes), *apiN, *apiTHP, *apiSmall, *apiAB)
		r.Logf("api: %s", jsonString(res.API))
	}
	res.LoadAvgEnd = loadavg()
	benchutil.Emit(r, res, *out)
	r.Close()
	if r.Failed() {
		os.Exit(1)
	}
}

// size runs n rounds of every method for one guest size on one pool.
func (b *bench) size(p pool, mib, n int) SizeResult {
	sr := SizeResult{GuestMiB: mib, Speedup: map[string]float64{}}
	sr.Raw.Command = strings.Join(benchutil.FioArgs("write", "STATE_DIR/fio.dat", mib), " ")
	var rawW, rawR []float64
	methods := []*MethodResult{}
	byName := map[string]*MethodResult{}
	add := func(name string) *MethodResult {
		m := &MethodResult{Method: name}
		methods = append(methods, m)
		byName[name] = m
		return m
	}
	if b.savevm {
		add("savevm").THP = true
	}
	mr := add(qemu.FormatMappedRAM.String())
	mr.Channels = b.channels
	if b.loadTHP {
		m := add(mappedRAMTHP)
		m.Channels, m.THP, m.loadOf = b.channels, true, mr.Method
		m.Note = "the mapped-ram file loaded into a QEMU with transparent huge pages (QEMU's default)"
	}
	add(qemu.FormatStream.String()).THP = true
	if mib <= b.gzipMax && b.gzipN > 0 {
		m := add(qemu.FormatGzipStream.String())
		m.THP, m.Note = true, fmt.Sprintf("gzip -c through exec:, first %d runs only", b.gzipN)
	}
	for rep := range n {
		w, rd := b.fio(p.Dir, mib)
		rawW, rawR = append(rawW, w), append(rawR, rd)
		b.round(p, mib, rep, &sr, methods)
	}
	sr.Raw.WriteMBps, sr.Raw.ReadMBps = benchutil.Summarise(rawW), benchutil.Summarise(rawR)
	sr.FaultMBps = benchutil.Summarise(b.faults)
	b.faults = nil
	for _, m := range methods {
		m.SaveMBps, m.LoadMBps = benchutil.Summarise(m.save), benchutil.Summarise(m.load)
		m.SaveS, m.LoadS = benchutil.Summarise(m.saveS), benchutil.Summarise(m.loadS)
		m.RestoreS = benchutil.Summarise(m.restoreS)
		m.SaveOfRaw = benchutil.Ratio(m.SaveMBps.Median, sr.Raw.WriteMBps.Median)
		m.LoadOfRaw = benchutil.Ratio(m.LoadMBps.Median, sr.Raw.ReadMBps.Median)
	}
	for _, m := range methods {
		if m != mr {
			if m.loadOf == "" {
				sr.Speedup[m.Method+"_save"] = benchutil.Ratio(mr.SaveMBps.Median, m.SaveMBps.Median)
			}
			sr.Speedup[m.Method+"_load"] = benchutil.Ratio(mr.LoadMBps.Median, m.LoadMBps.Median)
		}
	}
	sr.Methods = methods
	return sr
}

// round boots the guest once, saves it with every method, then loads each
// file into a fresh QEMU.
func (b *bench) round(p pool, mib, rep int, sr *SizeResult, methods []*MethodResult) {
	r := b.r
	cfg := b.cfg
	cfg.MemMiB, cfg.Seed = mib, uint64(rep+1)
	if b.savevm {
		cfg.StateDrive = filepath.Join(p.Dir, "vmstate.qcow2")
		if _, err := sh("qemu-img", "create", "-q", "-f", "qcow2", cfg.StateDrive, "64M"); err != nil {
			r.Fatalf("%v", err)
		}
		defer os.Remove(cfg.StateDrive)
	}
	want := b.boot(cfg)
	sr.FilledBytes = want.filled
	files := map[string]string{}
	saved := map[*MethodResult]int64{}
	for _, m := range methods {
		if m.loadOf != "" || m.Method == qemu.FormatGzipStream.String() && rep >= b.gzipN {
			continue
		}
		b.resume()
		var d time.Duration
		var bytes int64
		switch m.Method {
		case "savevm":
			d = b.saveVM(cfg.StateDrive)
			files[m.Method] = cfg.StateDrive
		default:
			f := format(m.Method)
			path := filepath.Join(p.Dir, m.Method+".state")
			st, err := qemu.Save(b.ctx, b.vm.Mon, path, qemu.SaveOptions{Format: f, Channels: b.channels})
			if err != nil {
				r.Fatalf("save %s: %v", m.Method, err)
			}
			d, bytes, files[m.Method] = st.Total, st.Bytes, path
			m.FileBytes = st.FileBytes
			if f == qemu.FormatMappedRAM {
				sr.RAMBytes = st.Bytes
			}
		}
		m.saveS = append(m.saveS, d.Seconds())
		saved[m] = bytes
		r.Logf("%s %d MiB run %d: save %s %.2fs", p.Name, mib, rep, m.Method, d.Seconds())
	}
	b.killVM()
	// savevm does not count bytes: its rate is over the RAM the mapped-ram
	// save of the same guest transferred.
	for m, bytes := range saved {
		if bytes == 0 {
			bytes = sr.RAMBytes
		}
		m.save = append(m.save, float64(bytes)/1e6/m.saveS[len(m.saveS)-1])
	}
	benchutil.DropCaches(r)
	b.faults = append(b.faults, faultFloor(r, mib))
	users := map[string]int{}
	for _, m := range methods {
		users[cmp.Or(m.loadOf, m.Method)]++
	}
	for _, m := range methods {
		file := cmp.Or(m.loadOf, m.Method)
		path, ok := files[file]
		if !ok {
			continue
		}
		benchutil.DropCaches(r)
		d, total := b.load(cfg, m, path, rep == 0, want.sum)
		m.loadS = append(m.loadS, d.Seconds())
		m.restoreS = append(m.restoreS, total.Seconds())
		m.load = append(m.load, float64(sr.RAMBytes)/1e6/d.Seconds())
		r.Logf("%s %d MiB run %d: load %s %.2fs (with QEMU's start %.2fs)", p.Name, mib, rep, m.Method, d.Seconds(), total.Seconds())
		if users[file]--; users[file] == 0 && m.Method != "savevm" {
			os.Remove(path)
		}
	}
}

// guestState is what the guest reported after filling its memory.
type guestState struct {
	sum    string
	filled int64
}

// boot starts the source guest and waits for its fill.
func (b *bench) boot(cfg guest.Config) guestState {
	vm, err := guest.Start(b.ctx, cfg)
	if err != nil {
		b.r.Fatalf("boot: %v", err)
	}
	b.vm = vm
	start := time.Now()
	sum, filled, err := vm.Ready(b.ctx)
	if err != nil {
		b.r.Fatalf("guest fill: %v", err)
	}
	b.r.Logf("guest %d MiB filled %d MiB in %.1fs (sum %s)", cfg.MemMiB, filled>>20, time.Since(start).Seconds(), sum)
	return guestState{sum: sum, filled: filled}
}

// resume continues a VM a previous save left in "postmigrate" (QEMU
// refuses to migrate it again).
func (b *bench) resume() {
	raw, err := b.vm.Mon.Run([]byte(`{"execute":"query-status"}`))
	if err != nil {
		b.r.Fatalf("query-status: %v", err)
	}
	if strings.Contains(string(raw), `"postmigrate"`) {
		if _, err := b.vm.Mon.Run([]byte(`{"execute":"cont"}`)); err != nil {
			b.r.Fatalf("cont: %v", err)
		}
	}
}

// saveVM runs the legacy savevm and makes the qcow2 durable (timed).
func (b *bench) saveVM(drive string) time.Duration {
	start := time.Now()
	if _, err := qemu.SaveVM(b.ctx, b.vm.Mon, "bench"); err != nil {
		b.r.Fatalf("%v", err)
	}
	f, err := os.Open(drive)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		b.r.Fatalf("fsync %s: %v", drive, err)
	}
	return time.Since(start)
}

// load starts a fresh QEMU and loads path into it; verify resumes the
// guest and compares its memory checksum with sum.
func (b *bench) load(cfg guest.Config, m *MethodResult, path string, verify bool, sum string) (load, total time.Duration) {
	cfg.Incoming, cfg.Paused, cfg.NoTHP = m.Method != "savevm", m.Method == "savevm", !m.THP
	start := time.Now()
	vm, err := guest.Start(b.ctx, cfg)
	if err != nil {
		b.r.Fatalf("start for load: %v", err)
	}
	b.vm = vm
	defer b.killVM()
	var d time.Duration
	if m.Method == "savevm" {
		d, err = qemu.LoadVM(b.ctx, vm.Mon, "bench")
	} else {
		var st qemu.SaveStats
		st, err = qemu.Load(b.ctx, vm.Mon, path, qemu.SaveOptions{Format: format(cmp.Or(m.loadOf, m.Method)), Channels: b.channels})
		d = st.Total
	}
	if err != nil {
		b.r.Fatalf("load %s: %v", m.Method, err)
	}
	total = time.Since(start)
	if verify {
		if _, err := vm.Mon.Run([]byte(`{"execute":"cont"}`)); err != nil {
			b.r.Fatalf("cont: %v", err)
		}
		got, err := vm.Sum(b.ctx)
		if err != nil {
			b.r.Fatalf("checksum after %s load: %v", m.Method, err)
		}
		ok := got == sum
		m.Verified = &ok
		if !ok {
			b.r.Errorf("%s: guest memory checksum after load %s, before save %s", m.Method, got, sum)
		}
	}
	return d, total
}

// sweep measures mapped-ram save and load for each channel count.
func (b *bench) sweep(p pool, mib int, chans []int, n int) *Sweep {
	sw := &Sweep{Pool: p.Name, GuestMiB: mib}
	cfg := b.cfg
	cfg.MemMiB, cfg.Seed = mib, 99
	b.boot(cfg)
	saves := make([][]float64, len(chans))
	loads := make([][]float64, len(chans))
	faults := make([][]float64, len(chans))
	var bytes int64
	for i, ch := range chans {
		for range n {
			b.resume()
			path := filepath.Join(p.Dir, fmt.Sprintf("sweep-%d.state", ch))
			st, err := qemu.Save(b.ctx, b.vm.Mon, path, qemu.SaveOptions{Channels: ch})
			if err != nil {
				b.r.Fatalf("sweep save: %v", err)
			}
			bytes = st.Bytes
			saves[i] = append(saves[i], float64(st.Bytes)/1e6/st.Total.Seconds())
			b.r.Logf("sweep: %d channels save %.2fs", ch, st.Total.Seconds())
		}
	}
	b.killVM()
	cfg.Incoming, cfg.NoTHP = true, !b.sweepTHP
	sw.LoadTHP = b.sweepTHP
	for i, ch := range chans {
		path := filepath.Join(p.Dir, fmt.Sprintf("sweep-%d.state", ch))
		for range n {
			benchutil.DropCaches(b.r)
			faults[i] = append(faults[i], faultFloor(b.r, mib))
			vm, err := guest.Start(b.ctx, cfg)
			if err != nil {
				b.r.Fatalf("sweep start: %v", err)
			}
			b.vm = vm
			st, err := qemu.Load(b.ctx, vm.Mon, path, qemu.SaveOptions{Channels: ch})
			b.killVM()
			if err != nil {
				b.r.Fatalf("sweep load: %v", err)
			}
			loads[i] = append(loads[i], float64(bytes)/1e6/st.Total.Seconds())
			b.r.Logf("sweep: %d channels load %.2fs", ch, st.Total.Seconds())
		}
		os.Remove(path)
	}
	for i, ch := range chans {
		sw.Rows = append(sw.Rows, SweepRow{Channels: ch, SaveMBps: benchutil.Summarise(saves[i]),
			LoadMBps: benchutil.Summarise(loads[i]), FaultMBps: benchutil.Summarise(faults[i])})
	}
	return sw
}

// killVM kills the QEMU this bench started last, if it runs.
func (b *bench) killVM() {
	if b.vm != nil {
		b.vm.Kill()
		b.vm = nil
	}
}

func format(method string) qemu.Format {
	for _, f := range []qemu.Format{qemu.FormatMappedRAM, qemu.FormatStream, qemu.FormatGzipStream} {
		if f.String() == method {
			return f
		}
	}
	panic("unknown method " + method)
}

// fio measures the state directory's raw sequential write and cold read
// once (MB/s).
func (b *bench) fio(dir string, mib int) (write, read float64) {
	write, read = benchutil.RawDisk(b.r, dir, mib)
	b.r.Logf("fio %d MiB: write %.0f MB/s, read %.0f MB/s", mib, write, read)
	return write, read
}

func ints(r *testhost.Runner, s string) []int {
	var out []int
	if s == "" {
		return nil
	}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			r.Fatalf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// faultFloor measures how fast this host hands out fresh anonymous memory
// the way QEMU's guest RAM gets it (MADV_HUGEPAGE, first touch), in MB/s.
func faultFloor(r *testhost.Runner, mib int) float64 {
	n := mib << 20
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		r.Fatalf("fault floor: %v", err)
	}
	defer syscall.Munmap(mem) //nolint:errcheck // nothing to do
	_ = syscall.Madvise(mem, unix.MADV_HUGEPAGE)
	start := time.Now()
	_ = benchutil.Parallel(2, 2, func(i int) error {
		for off := i * n / 2; off < (i+1)*n/2; off += 4096 {
			mem[off] = 1
		}
		return nil
	})
	rate := float64(n) / 1e6 / time.Since(start).Seconds()
	r.Logf("fault floor %d MiB: %.0f MB/s", mib, rate)
	return rate
}
