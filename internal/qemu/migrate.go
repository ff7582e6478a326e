package qemu

import (
	"context"
	"fmt"
	"time"
)

// Live migration of a VM between two QEMUs (the daemon's move): the disk
// is mirrored to the target's NBD export (drive-mirror, copy-mode
// write-blocking once in sync), the RAM and device state go by QEMU's own
// migration stream. Neither QEMU listens on the network: both ends are
// unix sockets the daemons relay. These are thin typed wrappers of the
// QMP commands that flow needs.

// MirrorJobID is the job id of a move's disk mirror.
const MirrorJobID = "vessel-move-disk"

// NBDExport is the export name the target's NBD server gives the root
// disk (its -drive id).
const NBDExport = "root"

// NBDServerStart starts QEMU's built-in NBD server on a unix socket.
func (m *Monitor) NBDServerStart(ctx context.Context, socket string) error {
	return m.Execute(ctx, "nbd-server-start", map[string]any{
		"addr": map[string]any{"type": "unix", "data": map[string]any{"path": socket}},
	}, nil)
}

// NBDServerAddRoot exports the root disk, writable, as NBDExport.
func (m *Monitor) NBDServerAddRoot(ctx context.Context) error {
	return m.Execute(ctx, "nbd-server-add", map[string]any{"device": "root", "name": NBDExport, "writable": true}, nil)
}

// NBDServerStop stops the NBD server (and its exports).
func (m *Monitor) NBDServerStop(ctx context.Context) error {
	return m.Execute(ctx, "nbd-server-stop", nil, nil)
}

// MigrateIncoming makes a QEMU started with -incoming defer listen for
// the migration stream at uri ("unix:PATH").
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// SetMigrateCapabilities sets migration capabilities (both ends must
// agree on postcopy-ram, multifd and the like).
func (m *Monitor) SetMigrateCapabilities(ctx context.Context, caps map[string]bool) error {
	list := make([]capability, 0, len(caps))
	for c, on := range caps {
		list = append(list, capability{Capability: c, State: on})
	}
	return m.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": list}, nil)
}

// MigrateParameters is the part of migrate-set-parameters a move sets.
type MigrateParameters struct {
	// DowntimeLimitMs is the longest stop QEMU plans for the last pass.
	DowntimeLimitMs int64 `json:"downtime-limit,omitempty"`
	// MaxBandwidth 0 lifts the rate limit (QEMU's default 128 MiB/s).
	MaxBandwidth int64 `json:"max-bandwidth"`
	// MaxPostcopyBandwidth 0: unlimited.
	MaxPostcopyBandwidth int64 `json:"max-postcopy-bandwidth"`
}

// SetMigrateParameters sets the migration's parameters.
func (m *Monitor) SetMigrateParameters(ctx context.Context, p MigrateParameters) error {
	return m.Execute(ctx, "migrate-set-parameters", p, nil)
}

// Migrate starts the outgoing migration to uri ("unix:PATH").
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

// MigrateCancel cancels an outgoing migration (the VM runs on).
func (m *Monitor) MigrateCancel(ctx context.Context) error {
	return m.Execute(ctx, "migrate_cancel", nil, nil)
}

// MigrateStartPostcopy switches a running precopy to post-copy (the
// target runs, pages follow on demand); postcopy-ram must be on.
func (m *Monitor) MigrateStartPostcopy(ctx context.Context) error {
	return m.Execute(ctx, "migrate-start-postcopy", nil, nil)
}

// RAMStats is query-migrate's "ram".
type RAMStats struct {
	Transferred      int64   `json:"transferred"`
	Remaining        int64   `json:"remaining"`
	Total            int64   `json:"total"`
	Duplicate        int64   `json:"duplicate"`
	Normal           int64   `json:"normal"`
	DirtyPagesRate   int64   `json:"dirty-pages-rate"`
	Mbps             float64 `json:"mbps"`
	DirtySyncCount   int64   `json:"dirty-sync-count"`
	PageSize         int64   `json:"page-size"`
	PostcopyRequests int64   `json:"postcopy-requests"`
	// PrecopyBytes, DowntimeBytes, PostcopyBytes: what moved in each
	// phase.
	PrecopyBytes  int64 `json:"precopy-bytes"`
	DowntimeBytes int64 `json:"downtime-bytes"`
	PostcopyBytes int64 `json:"postcopy-bytes"`
}

// MigrationStatus is query-migrate's reply.
type MigrationStatus struct {
	// Status: "none", "setup", "active", "postcopy-active",
	// "device", "completed", "failed", "cancelled", ...
	Status string    `json:"status"`
	RAM    *RAMStats `json:"ram,omitempty"`
	// TotalTime, Downtime, SetupTime in milliseconds; Downtime is QEMU's
	// own measure of the stop (completed only).
	TotalTime   int64  `json:"total-time"`
	Downtime    int64  `json:"downtime"`
	SetupTime   int64  `json:"setup-time"`
	ErrorDesc   string `json:"error-desc"`
	ExpDowntime int64  `json:"expected-downtime"`
}

// QueryMigrate asks the migration's status.
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationStatus, error) {
	var s MigrationStatus
	err := m.Execute(ctx, "query-migrate", nil, &s)
	return s, err
}

// Done says the migration has ended (completed, failed or cancelled).
func (s MigrationStatus) Done() bool {
	switch s.Status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// WaitMigration polls query-migrate every poll until the migration has
// ended or stop says enough (a post-copy switch, say: stop sees each
// status and returns true to return it), calling progress with each
// status. A failed or cancelled migration is an error wrapping
// ErrMigration.
func (m *Monitor) WaitMigration(ctx context.Context, poll time.Duration, stop func(MigrationStatus) bool) (MigrationStatus, error) {
	for {
		s, err := m.QueryMigrate(ctx)
		if err != nil {
			return s, err
		}
		switch {
		case s.Status == "completed":
			return s, nil
		case s.Status == "failed" || s.Status == "cancelled":
			return s, fmt.Errorf("%w: %s: %s", ErrMigration, s.Status, s.ErrorDesc)
		case stop != nil && stop(s):
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(poll):
		case <-m.migration:
		}
	}
}

// EventsCapability is the migration capability that makes QEMU send a
// MIGRATION event at each change of the migration's status.
const EventsCapability = "events"

// WatchMigration makes WaitMigration on m look again at once when QEMU
// sends a MIGRATION event (EventsCapability must be on), not only every
// poll: the end of a move's last pass (QEMU has stopped the VM for it) is
// seen when it happens, not up to a poll later. Call it once, before the
// migration starts; the events are read until m is closed (go-qemu's
// reader waits for them to be taken).
func (m *Monitor) WatchMigration(ctx context.Context) error {
	events, err := m.Events(ctx)
	if err != nil {
		return err
	}
	m.migration = make(chan struct{}, 1)
	go func() {
		for e := range events {
			if e.Event == "MIGRATION" {
				select {
				case m.migration <- struct{}{}:
				default:
				}
			}
		}
	}()
	return nil
}

// MirrorOptions is a drive-mirror of the root disk to an NBD export.
type MirrorOptions struct {
	// Target is the NBD export's URI (NBDUnixURI).
	Target string
	// Sync: "full" (the whole disk; holes become zero writes) or "top".
	Sync string
}

// NBDUnixURI names export on the NBD server at a unix socket.
func NBDUnixURI(socket, export string) string {
	return "nbd+unix:///" + export + "?socket=" + socket
}

// DriveMirror starts mirroring the root disk (-drive id "root") to an
// existing raw target, as job MirrorJobID: in write-blocking copy mode,
// so once the job is ready every guest write completes on both disks and
// the mirror stays converged whatever the guest writes.
func (m *Monitor) DriveMirror(ctx context.Context, o MirrorOptions) error {
	return m.Execute(ctx, "drive-mirror", map[string]any{
		"job-id": MirrorJobID, "device": "root", "target": o.Target, "format": "raw",
		"mode": "existing", "sync": o.Sync, "copy-mode": "write-blocking",
		"auto-finalize": true, "auto-dismiss": true,
	}, nil)
}

// BlockJob is one entry of query-block-jobs.
type BlockJob struct {
	Device string `json:"device"`
	Type   string `json:"type"`
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Ready  bool   `json:"ready"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// QueryBlockJob returns the job with id, or ok false when there is none
// (it ended).
func (m *Monitor) QueryBlockJob(ctx context.Context, id string) (job BlockJob, ok bool, err error) {
	var jobs []BlockJob
	if err := m.Execute(ctx, "query-block-jobs", nil, &jobs); err != nil {
		return BlockJob{}, false, err
	}
	for _, j := range jobs {
		if j.Device == id {
			return j, true, nil
		}
	}
	return BlockJob{}, false, nil
}

// WaitJobReady polls the block job id until it is ready (a mirror in
// sync), calling progress with each poll; a job that ends before that
// failed.
func (m *Monitor) WaitJobReady(ctx context.Context, id string, poll time.Duration, progress func(BlockJob)) (BlockJob, error) {
	for {
		j, ok, err := m.QueryBlockJob(ctx, id)
		if err != nil {
			return j, err
		}
		if !ok {
			return j, fmt.Errorf("%w: block job %s ended before it was ready", ErrMigration, id)
		}
		if j.Error != "" {
			return j, fmt.Errorf("%w: block job %s: %s", ErrMigration, id, j.Error)
		}
		if progress != nil {
			progress(j)
		}
		if j.Ready {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// BlockJobCancel cancels job id. A ready mirror cancelled without force
// completes without pivoting (the source keeps its disk; the target is a
// consistent copy); force drops it at once.
func (m *Monitor) BlockJobCancel(ctx context.Context, id string, force bool) error {
	return m.Execute(ctx, "block-job-cancel", map[string]any{"device": id, "force": force}, nil)
}

// WaitJobGone polls until job id no longer exists.
func (m *Monitor) WaitJobGone(ctx context.Context, id string, poll time.Duration) error {
	for {
		_, ok, err := m.QueryBlockJob(ctx, id)
		if err != nil || !ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
