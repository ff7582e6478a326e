package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Runner runs one raw QMP command and returns its raw reply. A
// *qmp.SocketMonitor (github.com/digitalocean/go-qemu/qmp) is one; the
// savefile functions need nothing else of the monitor, so tests drive them
// with a scripted fake.
type Runner interface {
	Run(command []byte) ([]byte, error)
}

// ErrMigration is wrapped by the errors of a save or load that QEMU itself
// reported as failed (query-migrate status "failed" or "cancelled").
var ErrMigration = errors.New("qemu migration failed")

// qmpCommand is one QMP request.
type qmpCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

// run sends cmd with args and decodes the reply's "return" into out (when
// out is not nil).
func run(mon Runner, cmd string, args, out any) error {
	req, err := json.Marshal(qmpCommand{Execute: cmd, Arguments: args})
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	raw, err := mon.Run(req)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	if out == nil {
		return nil
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", cmd, err)
	}
	if err := json.Unmarshal(reply.Return, out); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", cmd, err)
	}
	return nil
}

// capability is one entry of migrate-set-capabilities.
type capability struct {
	Capability string `json:"capability"`
	State      bool   `json:"state"`
}

// setCapabilities turns the migration capabilities mapped-ram and multifd
// on or off together (a mapped-ram stream is written by multifd channels;
// the plain stream wants both off).
func setCapabilities(mon Runner, mappedRAM bool) error {
	caps := []capability{
		{Capability: "mapped-ram", State: mappedRAM},
		{Capability: "multifd", State: mappedRAM},
	}
	return run(mon, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil)
}

// migrateParams are the migrate-set-parameters arguments vessel sets.
type migrateParams struct {
	// MaxBandwidth 0 lifts the rate limit (QEMU's RATE_LIMIT_DISABLED);
	// the default, 128 MiB/s, throttles a save to well under disk speed.
	MaxBandwidth   int64 `json:"max-bandwidth"`
	MultifdChannel int   `json:"multifd-channels,omitempty"`
	// DowntimeLimit (ms) is how long QEMU may stop a live VM at the end.
	DowntimeLimit int64 `json:"downtime-limit,omitempty"`
	DirectIO      *bool `json:"direct-io,omitempty"`
}

// migrationInfo is the part of query-migrate's reply vessel reads.
type migrationInfo struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
	TotalTime int64  `json:"total-time"` // ms
	// Downtime (ms, a completed migration) is from the vCPUs' stop to
	// the end.
	Downtime int64 `json:"downtime"`
	RAM      *struct {
		Transferred    int64   `json:"transferred"`
		DirtySyncCount int64   `json:"dirty-sync-count"`
		Remaining      int64   `json:"remaining"`
		Total          int64   `json:"total"`
		Mbps           float64 `json:"mbps"`
	} `json:"ram"`
}

// queryMigrate returns the current migration's state.
func queryMigrate(mon Runner) (migrationInfo, error) {
	var info migrationInfo
	err := run(mon, "query-migrate", nil, &info)
	return info, err
}

// runStatus returns query-status's "status" (e.g. "running", "paused",
// "postmigrate", "inmigrate").
func runStatus(mon Runner) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	err := run(mon, "query-status", nil, &st)
	return st.Status, err
}

// hmp runs a human monitor command through QMP's human-monitor-command and
// returns its text output.
func hmp(mon Runner, cmdline string) (string, error) {
	var out string
	err := run(mon, "human-monitor-command", map[string]string{"command-line": cmdline}, &out)
	return out, err
}
