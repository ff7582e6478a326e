package qemu

// Saving and loading a VM's memory and device state to a file on the pool
// at the disk's speed.
//
// The fast path is QEMU's migration to a file: URI with the mapped-ram
// capability (QEMU 9.0: each RAM page has a fixed offset in the file, so
// the file is written and read with large aligned requests and no stream
// framing), multifd (several channels write in parallel) and the direct-io
// parameter (QEMU 9.1: the channels open the file O_DIRECT, so the save
// neither fills the page cache nor stalls on writeback). Three things the
// upstream defaults get wrong are handled here:
//
//   - max-bandwidth defaults to 128 MiB/s and throttles a save; it is set
//     to 0 (no limit);
//   - QEMU does not fsync the file when the migration completes; Save does
//     (the file, then its directory) before it reports success;
//   - on btrfs since kernel 6.14, an O_DIRECT write to a file with data
//     checksums is turned into a buffered one; storage.PrepareNoDataSumDir marks the
//     state directory NODATASUM (FS_NOCOW_FL, chattr +C) while it is empty,
//     so the files made in it inherit the flag.
//
// The plain single-stream file: migration (FormatStream, what the Incus
// path writes, less its gzip) and the legacy savevm/loadvm (SaveVM, LoadVM)
// are here too, for bench/vmsnapshot to set beside the fast path.

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Format is how a state file is laid out.
type Format int

const (
	// FormatMappedRAM is QEMU's mapped-ram layout written by multifd
	// channels, O_DIRECT (the default).
	FormatMappedRAM Format = iota
	// FormatStream is QEMU's plain migration stream written by one thread,
	// buffered.
	FormatStream
	// FormatGzipStream is the plain stream piped through gzip -c (the
	// Incus/LXD way), through QEMU's exec: transport.
	FormatGzipStream
)

// String names the format as the bench's JSON does.
func (f Format) String() string {
	switch f {
	case FormatMappedRAM:
		return "mapped-ram"
	case FormatStream:
		return "stream"
	case FormatGzipStream:
		return "gzip-stream"
	}
	return fmt.Sprintf("format(%d)", int(f))
}

// DefaultChannels is the multifd channel count used when SaveOptions does
// not set one: 8, or the CPU count where that is larger (at most 16).
// With direct-io each channel has one request in flight, so the count is
// the save's and load's queue depth, and the channels mostly wait on the
// disk rather than use CPU. bench/vmsnapshot's sweep on this 2-core
// machine (TCG guest, 8 GiB, rootfs): saves ran at ~1.0-1.2 GB/s with 2, 4
// or 8 channels alike, loads at 320 / 526 / 953 MB/s with 2 / 4 / 8 (fio's
// read with 8 requests in flight: ~1.2 GB/s).
func DefaultChannels() int {
	return min(max(runtime.NumCPU(), 8), 16)
}

// SaveOptions tunes Save and Load.
type SaveOptions struct {
	// Format is the file's layout; the zero value is FormatMappedRAM.
	Format Format
	// Channels is the multifd channel count (FormatMappedRAM only); 0
	// means DefaultChannels(). A file may be loaded with a count other than
	// the one it was saved with.
	Channels int
	// NoDirectIO turns direct-io off (FormatMappedRAM only), for
	// comparison.
	NoDirectIO bool
	// Poll is the interval between query-migrate calls; 0 means 20ms.
	Poll time.Duration
	// Progress, if set, is called after every poll with the RAM bytes done
	// and the total.
	Progress func(done, total int64)
	// Live (Save only) leaves a running VM running while its RAM is
	// copied: QEMU writes the pages its guest dirtied again, pass after
	// pass (a mapped-ram file rewrites them in place), and stops the vCPUs
	// only for the last pass and the device state, when what is left fits
	// DowntimeLimit at the measured rate. A guest that dirties memory
	// faster than the file takes it is stopped after LiveMaxPasses passes.
	// The VM is left in "postmigrate" as without Live.
	Live bool
	// DowntimeLimit is QEMU's downtime-limit for a live save; 0 means
	// DefaultDowntimeLimit.
	DowntimeLimit time.Duration
	// LiveMaxPasses bounds a live save's dirty passes before Save stops
	// the VM itself; 0 means DefaultLiveMaxPasses.
	LiveMaxPasses int
	// NoSync (Save only) leaves the fsync of the file to the caller
	// (SyncFile): a live snapshot resumes the VM before it.
	NoSync bool
	// NoPrealloc (Load only, FormatMappedRAM) leaves the guest's RAM to be
	// faulted in by the channels' reads (preallocRAM), for comparison.
	NoPrealloc bool
}

// Live save defaults: a short stop at the end (the file takes about 1 GB/s
// here, so 100 ms is ~100 MB of pages left), and a bound on the passes for
// a guest that rewrites its memory faster than the disk takes it.
const (
	DefaultDowntimeLimit = 100 * time.Millisecond
	DefaultLiveMaxPasses = 8
)

// SaveStats describes a completed save or load.
type SaveStats struct {
	// Bytes is the RAM QEMU transferred (query-migrate's ram.transferred;
	// 0 for a load: the destination does not count); FileBytes is the
	// state file's allocated size.
	Bytes     int64
	FileBytes int64
	// Migrate is the time from the migrate command until QEMU reported
	// "completed"; Sync is the fsync of the file and its directory after
	// it (a save only); Total is the whole call.
	Migrate time.Duration
	Sync    time.Duration
	Total   time.Duration
	// Prealloc (a mapped-ram load) is QEMU populating the guest RAM
	// before migrate-incoming (preallocRAM): part of the load's cost, not
	// in Migrate.
	Prealloc time.Duration
	// QEMUTotalMs is QEMU's own total-time for the migration.
	QEMUTotalMs int64
	// Stopped is when the vCPUs stopped (a save of a running VM: at once,
	// or with Live when QEMU stopped them for the last pass, from its own
	// total-time and downtime); zero for a VM that was not running.
	// Downtime is QEMU's count from that stop to the end of the migration.
	Stopped  time.Time
	Downtime time.Duration
	// Passes is QEMU's dirty-sync-count (a live save's passes over RAM).
	Passes int64
	// ForcedStop says a live save did not converge and Save stopped the
	// VM after LiveMaxPasses passes.
	ForcedStop bool
}

// Save writes the VM's memory and device state to path. A running VM is
// stopped first (the state is the instant of the stop), or with opts.Live
// by QEMU for the last pass; the VM is left stopped ("postmigrate") and
// `cont` resumes it. path must be absolute and
// hold no comma (QEMU's URI syntax); its directory should have been made
// with storage.PrepareNoDataSumDir. The file is fsynced, and its directory, before Save
// returns nil.
func Save(ctx context.Context, mon Runner, path string, opts SaveOptions) (SaveStats, error) {
	start := time.Now()
	var st SaveStats
	if err := checkStatePath(path); err != nil {
		return st, err
	}
	status, err := runStatus(mon)
	if err != nil {
		return st, fmt.Errorf("save %s: %w", path, err)
	}
	running := status == "running"
	if running && !opts.Live {
		if err := run(mon, "stop", nil, nil); err != nil {
			return st, fmt.Errorf("save %s: %w", path, err)
		}
		st.Stopped = time.Now()
	}
	opts.Live = opts.Live && running
	if err := configure(mon, opts); err != nil {
		return st, fmt.Errorf("save %s: %w", path, err)
	}
	uri, err := saveURI(path, opts.Format)
	if err != nil {
		return st, err
	}
	if err := migrateFile(ctx, mon, "migrate", uri, opts, &st); err != nil {
		return st, fmt.Errorf("save %s: %w", path, err)
	}
	if !opts.NoSync {
		sstart := time.Now()
		if err := syncFile(path); err != nil {
			return st, fmt.Errorf("save %s: %w", path, err)
		}
		st.Sync = time.Since(sstart)
	}
	if fi, err := os.Stat(path); err == nil {
		st.FileBytes = allocated(fi)
	}
	st.Total = time.Since(start)
	return st, nil
}

// migrateFile runs one file migration (cmd: "migrate" to save,
// "migrate-incoming" to load), waits for it, and records its time and
// QEMU's byte and time counts in st.
func migrateFile(ctx context.Context, mon Runner, cmd, uri string, opts SaveOptions, st *SaveStats) error {
	start := time.Now()
	if err := run(mon, cmd, map[string]any{"uri": uri}, nil); err != nil {
		return err
	}
	info, stopped, err := waitMigration(ctx, mon, opts)
	st.Migrate = time.Since(start)
	if info.RAM != nil {
		st.Bytes = info.RAM.Transferred
		st.Passes = info.RAM.DirtySyncCount
	}
	st.QEMUTotalMs = info.TotalTime
	if opts.Live && cmd == "migrate" && err == nil {
		st.Downtime = time.Duration(info.Downtime) * time.Millisecond
		// QEMU's clock starts when it takes the command, a moment after
		// start: the estimate errs towards a longer stop.
		st.Stopped = start.Add(time.Duration(info.TotalTime-info.Downtime) * time.Millisecond)
		// It stopped within the save, whatever the two clocks say.
		if end := start.Add(st.Migrate); st.Stopped.After(end) {
			st.Stopped = end.Add(-st.Downtime)
		}
		if st.Stopped.Before(start) {
			st.Stopped = start
		}
		if !stopped.IsZero() && stopped.Before(st.Stopped) {
			st.Stopped = stopped
		}
		st.ForcedStop = !stopped.IsZero()
	}
	return err
}

// Load reads the state Save wrote at path into a QEMU started with
// `-incoming defer` (and the same machine, devices and memory size as the
// saved one). The VM is left paused when QEMU was started with -S; `cont`
// is the caller's. opts.Format must be the one the file was saved with.
// A mapped-ram load has QEMU populate its guest RAM first (preallocRAM,
// unless opts.NoPrealloc or the file holds less than half of the RAM:
// populateWorth), so the channels' O_DIRECT reads stay direct: QEMU should
// be in its memory cgroup by then.
func Load(ctx context.Context, mon Runner, path string, opts SaveOptions) (SaveStats, error) {
	start := time.Now()
	var st SaveStats
	if err := checkStatePath(path); err != nil {
		return st, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return st, fmt.Errorf("load: %w", err)
	}
	if err := configure(mon, opts); err != nil {
		return st, fmt.Errorf("load %s: %w", path, err)
	}
	if opts.Format == FormatMappedRAM && !opts.NoPrealloc {
		pstart := time.Now()
		worth, err := populateWorth(mon, allocated(fi))
		if err == nil && worth {
			err = preallocRAM(mon)
		}
		if err != nil {
			return st, fmt.Errorf("load %s: %w", path, err)
		}
		st.Prealloc = time.Since(pstart)
	}
	uri, err := loadURI(path, opts.Format)
	if err != nil {
		return st, err
	}
	if err := migrateFile(ctx, mon, "migrate-incoming", uri, opts, &st); err != nil {
		return st, fmt.Errorf("load %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil {
		st.FileBytes = allocated(fi)
	}
	st.Total = time.Since(start)
	return st, nil
}

// configure sets the capabilities and parameters of opts.Format. Both
// sides of a save/load must agree on the capabilities.
func configure(mon Runner, opts SaveOptions) error {
	mapped := opts.Format == FormatMappedRAM
	if err := setCapabilities(mon, mapped); err != nil {
		return err
	}
	p := migrateParams{MaxBandwidth: 0}
	if opts.Live {
		p.DowntimeLimit = cmp.Or(opts.DowntimeLimit, DefaultDowntimeLimit).Milliseconds()
	}
	if mapped {
		p.MultifdChannel = opts.Channels
		if p.MultifdChannel <= 0 {
			p.MultifdChannel = DefaultChannels()
		}
		direct := !opts.NoDirectIO
		p.DirectIO = &direct
	}
	return run(mon, "migrate-set-parameters", p, nil)
}

// waitMigration polls query-migrate until the migration completes, fails
// or ctx ends (then the migration is cancelled). A live save that has made
// opts.LiveMaxPasses passes without converging gets the VM stopped: it
// then ends with one more pass; stopped is when (zero if not).
func waitMigration(ctx context.Context, mon Runner, opts SaveOptions) (info migrationInfo, stopped time.Time, err error) {
	poll := opts.Poll
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	maxPasses := int64(cmp.Or(opts.LiveMaxPasses, DefaultLiveMaxPasses))
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		info, err = queryMigrate(mon)
		if err != nil {
			return info, stopped, err
		}
		if opts.Progress != nil && info.RAM != nil {
			opts.Progress(info.RAM.Transferred, info.RAM.Total)
		}
		switch info.Status {
		case "completed":
			return info, stopped, nil
		case "failed", "cancelled":
			return info, stopped, fmt.Errorf("%w: %s %s", ErrMigration, info.Status, info.ErrorDesc)
		case "active":
			if opts.Live && stopped.IsZero() && info.RAM != nil && info.RAM.DirtySyncCount > maxPasses {
				t0 := time.Now()
				if err := run(mon, "stop", nil, nil); err != nil {
					_ = run(mon, "migrate_cancel", nil, nil)
					return info, stopped, err
				}
				stopped = t0
			}
		}
		// In "device" QEMU has stopped the vCPUs and writes the last
		// pages and the device state: the end is near, and every
		// millisecond of the poll is one of a live save's stop.
		next := t.C
		if info.Status == "device" {
			next = time.After(time.Millisecond)
		}
		select {
		case <-ctx.Done():
			_ = run(mon, "migrate_cancel", nil, nil)
			return info, stopped, ctx.Err()
		case <-next:
		}
	}
}

// checkStatePath rejects paths QEMU's file: URI cannot carry.
func checkStatePath(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("state file %q: not an absolute path", path)
	}
	if strings.ContainsAny(path, ",'\"\\ \n") {
		return fmt.Errorf("state file %q: commas, quotes, spaces and backslashes are not allowed", path)
	}
	return nil
}

// saveURI is the migrate URI that writes path in format f.
func saveURI(path string, f Format) (string, error) {
	switch f {
	case FormatMappedRAM, FormatStream:
		return "file:" + path, nil
	case FormatGzipStream:
		return "exec:gzip -c > '" + path + "'", nil
	}
	return "", fmt.Errorf("save: unknown format %v", f)
}

// loadURI is the migrate-incoming URI that reads path in format f.
func loadURI(path string, f Format) (string, error) {
	switch f {
	case FormatMappedRAM, FormatStream:
		return "file:" + path, nil
	case FormatGzipStream:
		return "exec:gzip -dc < '" + path + "'", nil
	}
	return "", fmt.Errorf("load: unknown format %v", f)
}

// SyncFile makes a state file Save wrote with NoSync durable, and its
// directory entry.
func SyncFile(path string) error { return syncFile(path) }

// syncFile makes path and its directory entry durable: QEMU closes the
// state file without fsync.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir fsyncs a directory.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// SaveVM runs the legacy `savevm TAG` through HMP: memory and device state
// go into the first writable qcow2 drive (the VM needs one, e.g. a
// `-drive if=none,format=qcow2` for the state alone), one buffered stream
// through the block layer. The VM is paused for the duration and resumed
// if it was running. Kept for comparison only.
func SaveVM(ctx context.Context, mon Runner, tag string) (time.Duration, error) {
	return hmpTimed(ctx, mon, "savevm", tag)
}

// LoadVM runs the legacy `loadvm TAG` through HMP (the VM stays paused if
// it was). Kept for comparison only.
func LoadVM(ctx context.Context, mon Runner, tag string) (time.Duration, error) {
	return hmpTimed(ctx, mon, "loadvm", tag)
}

// hmpTimed runs `cmd tag` and times it. HMP reports a failure as text, not
// as a QMP error: any output is treated as one.
func hmpTimed(ctx context.Context, mon Runner, cmd, tag string) (time.Duration, error) {
	if tag == "" || strings.ContainsAny(tag, " \n\"'") {
		return 0, fmt.Errorf("%s: bad tag %q", cmd, tag)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	out, err := hmp(mon, cmd+" "+tag)
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s %s: %w", cmd, tag, err)
	}
	if s := strings.TrimSpace(out); s != "" {
		return d, fmt.Errorf("%s %s: %w: %s", cmd, tag, ErrMigration, s)
	}
	return d, nil
}
