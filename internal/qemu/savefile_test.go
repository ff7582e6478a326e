package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeMonitor answers QMP commands from a script and records them. On
// "migrate" to a file: URI it creates the file, as QEMU would.
type fakeMonitor struct {
	t       *testing.T
	status  string
	migrate []string // successive query-migrate statuses; the last repeats
	sent    []map[string]any
	onQuery func(n int)
	// ram is query-memory-size-summary's base-memory (0: not reported).
	ram     int64
	queries int
	// passes is query-migrate's ram.dirty-sync-count; completeOnStop
	// makes a stop end the migration (a live save Save stopped).
	passes         int
	completeOnStop bool
}

func (f *fakeMonitor) Run(cmd []byte) ([]byte, error) {
	var req map[string]any
	if err := json.Unmarshal(cmd, &req); err != nil {
		f.t.Fatalf("bad command %s: %v", cmd, err)
	}
	f.sent = append(f.sent, req)
	args, _ := req["arguments"].(map[string]any)
	switch req["execute"] {
	case "query-status":
		return []byte(`{"return":{"status":"` + f.status + `","running":false}}`), nil
	case "query-memory-size-summary":
		return []byte(`{"return":{"base-memory":` + strconv.FormatInt(f.ram, 10) + `}}`), nil
	case "qom-list":
		return []byte(`{"return":[{"name":"pc.ram","type":"child<memory-backend-ram>"},{"name":"rng0","type":"child<rng-random>"}]}`), nil
	case "stop":
		f.status = "paused"
		if f.completeOnStop {
			f.migrate, f.queries = []string{"completed"}, 0
		}
	case "migrate", "migrate-incoming":
		uri, _ := args["uri"].(string)
		if p, ok := strings.CutPrefix(uri, "file:"); ok && req["execute"] == "migrate" {
			if err := os.WriteFile(p, []byte("state"), 0o600); err != nil {
				return nil, err
			}
		}
	case "query-migrate":
		s := f.migrate[min(f.queries, len(f.migrate)-1)]
		f.queries++
		if f.onQuery != nil {
			f.onQuery(f.queries)
		}
		return []byte(`{"return":{"status":"` + s + `","error-desc":"boom","total-time":42,"downtime":7,` +
			`"ram":{"transferred":4096,"remaining":0,"total":8192,"mbps":1,"dirty-sync-count":` + strconv.Itoa(f.passes) + `}}}`), nil
	}
	return []byte(`{"return":{}}`), nil
}

// find returns the arguments of the first command named cmd.
func (f *fakeMonitor) find(cmd string) (map[string]any, bool) {
	for _, r := range f.sent {
		if r["execute"] == cmd {
			a, _ := r["arguments"].(map[string]any)
			return a, true
		}
	}
	return nil, false
}

func (f *fakeMonitor) names() []string {
	var out []string
	for _, r := range f.sent {
		out = append(out, r["execute"].(string))
	}
	return out
}

func TestSaveMappedRAM(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.state")
	mon := &fakeMonitor{t: t, status: "running", migrate: []string{"setup", "active", "active", "completed"}}
	var progress int
	st, err := Save(context.Background(), mon, path, SaveOptions{Channels: 3, Progress: func(done, total int64) {
		if done != 4096 || total != 8192 {
			t.Errorf("progress %d/%d", done, total)
		}
		progress++
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"query-status", "stop", "migrate-set-capabilities", "migrate-set-parameters", "migrate",
		"query-migrate", "query-migrate", "query-migrate", "query-migrate"}
	if got := mon.names(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("commands %v, want %v", got, want)
	}
	caps, _ := mon.find("migrate-set-capabilities")
	if b, _ := json.Marshal(caps); string(b) != `{"capabilities":[{"capability":"mapped-ram","state":true},{"capability":"multifd","state":true}]}` {
		t.Errorf("capabilities %s", b)
	}
	params, _ := mon.find("migrate-set-parameters")
	if params["max-bandwidth"] != 0.0 || params["multifd-channels"] != 3.0 || params["direct-io"] != true {
		t.Errorf("parameters %v", params)
	}
	m, _ := mon.find("migrate")
	if m["uri"] != "file:"+path {
		t.Errorf("uri %v", m["uri"])
	}
	if progress != 4 || st.Bytes != 4096 || st.QEMUTotalMs != 42 || st.FileBytes == 0 {
		t.Errorf("progress calls %d, stats %+v", progress, st)
	}
}

func TestSaveStreamAndDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	mon := &fakeMonitor{t: t, status: "paused", migrate: []string{"completed"}}
	if _, err := Save(context.Background(), mon, path, SaveOptions{Format: FormatStream}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("stop"); ok {
		t.Error("a paused VM was stopped again")
	}
	caps, _ := mon.find("migrate-set-capabilities")
	if b, _ := json.Marshal(caps); strings.Contains(string(b), "true") {
		t.Errorf("stream capabilities %s", b)
	}
	params, _ := mon.find("migrate-set-parameters")
	if _, ok := params["direct-io"]; ok || params["max-bandwidth"] != 0.0 {
		t.Errorf("stream parameters %v", params)
	}

	mon = &fakeMonitor{t: t, status: "paused", migrate: []string{"completed"}}
	if _, err := Save(context.Background(), mon, path, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	params, _ = mon.find("migrate-set-parameters")
	if params["multifd-channels"] != float64(DefaultChannels()) {
		t.Errorf("default channels %v, want %d", params["multifd-channels"], DefaultChannels())
	}
}

func TestSaveFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	mon := &fakeMonitor{t: t, status: "paused", migrate: []string{"active", "failed"}}
	_, err := Save(context.Background(), mon, path, SaveOptions{})
	if !errors.Is(err, ErrMigration) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err %v, want ErrMigration with QEMU's error-desc", err)
	}
}

func TestSaveCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mon := &fakeMonitor{t: t, status: "paused", migrate: []string{"active"}}
	mon.onQuery = func(n int) {
		if n == 3 {
			cancel()
		}
	}
	_, err := Save(ctx, mon, path, SaveOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if _, ok := mon.find("migrate_cancel"); !ok {
		t.Error("the migration was not cancelled in QEMU")
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	mon := &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}}
	if _, err := Load(context.Background(), mon, path, SaveOptions{}); err == nil {
		t.Fatal("load of a missing file succeeded")
	}
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f   Format
		uri string
	}{
		{FormatMappedRAM, "file:" + path},
		{FormatStream, "file:" + path},
		{FormatGzipStream, "exec:gzip -dc < '" + path + "'"},
	} {
		mon := &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"active", "completed"}}
		if _, err := Load(context.Background(), mon, path, SaveOptions{Format: tc.f, Channels: 5}); err != nil {
			t.Fatal(err)
		}
		if _, ok := mon.find("stop"); ok {
			t.Error("load stopped the VM")
		}
		if _, ok := mon.find("cont"); ok {
			t.Error("load resumed the VM: that is the caller's")
		}
		m, _ := mon.find("migrate-incoming")
		if m["uri"] != tc.uri {
			t.Errorf("%v: uri %v, want %s", tc.f, m["uri"], tc.uri)
		}
		// A mapped-ram load populates the RAM backend first (and only
		// it), so that the channels' O_DIRECT reads stay direct.
		var sets []string
		for _, r := range mon.sent {
			if r["execute"] == "qom-set" {
				a := r["arguments"].(map[string]any)
				sets = append(sets, fmt.Sprint(a["path"], " ", a["property"], "=", a["value"]))
			}
		}
		want := ""
		if tc.f == FormatMappedRAM {
			want = fmt.Sprintf("/objects/pc.ram prealloc-threads=%d,/objects/pc.ram prealloc=true", preallocThreads)
			if n := mon.names(); slices.Index(n, "qom-set") > slices.Index(n, "migrate-incoming") {
				t.Errorf("prealloc after migrate-incoming: %v", n)
			}
		}
		if got := strings.Join(sets, ","); got != want {
			t.Errorf("%v: qom-set %q, want %q", tc.f, got, want)
		}
	}
	mon = &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}}
	if _, err := Load(context.Background(), mon, path, SaveOptions{NoPrealloc: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("qom-set"); ok {
		t.Error("NoPrealloc load populated the RAM")
	}
	// A file holding under half of the RAM (a guest that used little of
	// it): the RAM is left to the reads, not grown to its whole size.
	mon = &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}, ram: 1 << 30}
	if _, err := Load(context.Background(), mon, path, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("qom-set"); ok {
		t.Error("a load of a 1-byte file for 1 GiB of RAM populated it")
	}
	// One holding at least half of it: populated.
	mon = &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}, ram: 4096}
	if _, err := Load(context.Background(), mon, path, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("qom-set"); !ok {
		t.Error("a load of a file holding all of the RAM did not populate it")
	}
}

func TestStatePathChecked(t *testing.T) {
	for _, p := range []string{"rel/vm.state", "/a,b/vm.state", "/a b/vm.state", "/a'b"} {
		mon := &fakeMonitor{t: t, status: "paused", migrate: []string{"completed"}}
		if _, err := Save(context.Background(), mon, p, SaveOptions{}); err == nil {
			t.Errorf("save to %q accepted", p)
		}
		if len(mon.sent) != 0 {
			t.Errorf("save to %q sent %v", p, mon.names())
		}
	}
}

func TestHMPFailureIsAnError(t *testing.T) {
	mon := hmpFake{out: "Error: No block device can accept snapshots"}
	if _, err := SaveVM(context.Background(), mon, "snap"); !errors.Is(err, ErrMigration) {
		t.Errorf("savevm error text not reported: %v", err)
	}
	if _, err := LoadVM(context.Background(), hmpFake{}, "snap"); err != nil {
		t.Errorf("loadvm with no output: %v", err)
	}
	if _, err := SaveVM(context.Background(), hmpFake{}, "a b"); err == nil {
		t.Error("tag with a space accepted")
	}
}

type hmpFake struct{ out string }

func (h hmpFake) Run([]byte) ([]byte, error) {
	b, _ := json.Marshal(map[string]string{"return": h.out})
	return b, nil
}

// TestSaveLive: a live save does not stop the VM itself, sets the
// downtime limit, and takes QEMU's stop instant from its times; with
// NoSync the caller syncs.
func TestSaveLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	mon := &fakeMonitor{t: t, status: "running", passes: 3, migrate: []string{"setup", "active", "active", "completed"}}
	before := time.Now()
	st, err := Save(context.Background(), mon, path, SaveOptions{Live: true, NoSync: true, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, sent := mon.find("stop"); sent {
		t.Errorf("a live save stopped the VM itself: %v", mon.names())
	}
	p, _ := mon.find("migrate-set-parameters")
	if p["downtime-limit"] != float64(DefaultDowntimeLimit.Milliseconds()) {
		t.Errorf("parameters %v", p)
	}
	if st.Downtime != 7*time.Millisecond || st.Passes != 3 || st.ForcedStop || st.Sync != 0 {
		t.Errorf("stats %+v", st)
	}
	if st.Stopped.Before(before) || st.Stopped.After(time.Now()) {
		t.Errorf("stopped at %v, not within the save (%v on)", st.Stopped, before)
	}
	if err := SyncFile(path); err != nil {
		t.Error(err)
	}
}

// TestSaveLiveForcedStop: a live save that has not converged after
// LiveMaxPasses passes gets the VM stopped, and then completes.
func TestSaveLiveForcedStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	mon := &fakeMonitor{t: t, status: "running", passes: 5, completeOnStop: true, migrate: []string{"active"}}
	before := time.Now()
	st, err := Save(context.Background(), mon, path, SaveOptions{Live: true, LiveMaxPasses: 4, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, sent := mon.find("stop"); !sent || !st.ForcedStop {
		t.Errorf("not stopped: %v, %+v", mon.names(), st)
	}
	if st.Stopped.Before(before) {
		t.Errorf("stopped at %v", st.Stopped)
	}
}
