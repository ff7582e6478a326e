package api

// Memory modes of a live migration (InstanceMigratePost.Memory).
const (
	// MemoryLazy moves memory after the target resumed (post-copy).
	MemoryLazy = "lazy"
	// MemoryCopy dumps all memory while frozen (for kernels without
	// userfaultfd, and the in-run baseline).
	MemoryCopy = "copy"
	// MemoryPrecopy copies memory in passes while the container runs
	// (each pass the pages written since the one before), then only the
	// last pass's writes while frozen: nothing depends on the source
	// once the target runs.
	MemoryPrecopy = "precopy"
	// MemoryAuto (the default) picks copy for a container with little
	// memory, where copying it costs less frozen time than setting up
	// post-copy, and lazy otherwise. The source decides before it starts.
	MemoryAuto = "auto"
)

// MetaTiming is the metadata key of a finished migration operation's
// MigrationTiming report.
const MetaTiming = "timing"

// MigrationTiming is the per-phase report of a migration (vzmigrate -t
// style), in seconds, with the bytes moved in each phase.
type MigrationTiming struct {
	// Mode is how the instance moved: "cold", "live/" + its memory mode
	// ("live/lazy", "live/copy"), or "copy" (vessel copy).
	Mode             string  `json:"mode"`
	Precopy          float64 `json:"precopy"`
	SuspendDump      float64 `json:"suspend_dump"`
	CopyAfterSuspend float64 `json:"copy_after_suspend"`
	CopyDump         float64 `json:"copy_dump"`
	UndumpResume     float64 `json:"undump_resume"`
	FrozenTotal      float64 `json:"frozen_total"`
	// ResumeReport is how long the target took, after the tasks resumed
	// there, to record the container as running and answer (not frozen
	// time: the container runs).
	ResumeReport      float64 `json:"resume_report,omitempty"`
	Postcopy          float64 `json:"postcopy"`
	Total             float64 `json:"total"`
	PrecopyIterations int     `json:"precopy_iterations"`
	PrecopyBytes      int64   `json:"precopy_bytes"`
	AfterSuspendBytes int64   `json:"copy_after_suspend_bytes"`
	DumpBytes         int64   `json:"copy_dump_bytes"`
	PostcopyBytes     int64   `json:"postcopy_bytes"`
	// MemoryPasses are a pre-copy move's memory passes, in order (the
	// final dump's pages are DumpBytes).
	MemoryPasses []MemoryPass `json:"memory_passes,omitempty"`
	// AutoChoice says why --memory=auto picked its mode, where it measured.
	AutoChoice string `json:"auto_choice,omitempty"`
	// VM is a virtual machine's move, as QEMU reports it.
	VM *VMMoveTiming `json:"vm,omitempty"`
}

// VMMoveTiming is a VM's live move: the disk mirror until in sync, the
// RAM pre-copy (QEMU's passes), the stop QEMU measured (downtime), the
// switch-over until the target runs it, and the post-copy window.
type VMMoveTiming struct {
	DiskMirror     float64 `json:"disk_mirror"`
	DiskBytes      int64   `json:"disk_bytes"`
	RAMPrecopy     float64 `json:"ram_precopy"`
	RAMIterations  int64   `json:"ram_iterations"`
	RAMBytes       int64   `json:"ram_bytes"`
	DowntimeQEMU   float64 `json:"downtime_qemu"`
	Switchover     float64 `json:"switchover"`
	Postcopy       float64 `json:"postcopy,omitempty"`
	PostcopyBytes  int64   `json:"postcopy_bytes,omitempty"`
	PostcopyReason string  `json:"postcopy_reason,omitempty"`
	DirtyPagesRate int64   `json:"dirty_pages_rate,omitempty"`
	LinkMbps       float64 `json:"link_mbps,omitempty"`
}

// MemoryPass is one pre-copy memory pass: the pages CRIU wrote while the
// container ran (all of them first, then those written since the pass
// before), how long CRIU took, and how long they took to reach the target
// (while the next pass ran).
type MemoryPass struct {
	Pages       int64   `json:"pages"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	SendSeconds float64 `json:"send_seconds"`
}
