package api

// Memory modes of a live migration (InstanceMigratePost.Memory).
const (
	// MemoryLazy moves memory after the target resumed (post-copy).
	MemoryLazy = "lazy"
	// MemoryCopy dumps all memory while frozen (for kernels without
	// userfaultfd, and the in-run baseline).
	MemoryCopy = "copy"
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
	Mode              string  `json:"mode"`
	Precopy           float64 `json:"precopy"`
	SuspendDump       float64 `json:"suspend_dump"`
	CopyAfterSuspend  float64 `json:"copy_after_suspend"`
	CopyDump          float64 `json:"copy_dump"`
	UndumpResume      float64 `json:"undump_resume"`
	FrozenTotal       float64 `json:"frozen_total"`
	Postcopy          float64 `json:"postcopy"`
	Total             float64 `json:"total"`
	PrecopyIterations int     `json:"precopy_iterations"`
	PrecopyBytes      int64   `json:"precopy_bytes"`
	AfterSuspendBytes int64   `json:"copy_after_suspend_bytes"`
	DumpBytes         int64   `json:"copy_dump_bytes"`
	PostcopyBytes     int64   `json:"postcopy_bytes"`
}
