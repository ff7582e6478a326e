package qemu

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeQMPMigration serves one QMP connection on a unix socket as a QEMU
// whose migration is "active" until fire is closed; then it sends a
// MIGRATION event and says "completed" from then on.
func fakeQMPMigration(t *testing.T, sock string, fire <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		enc, dec := json.NewEncoder(c), json.NewDecoder(c)
		_ = enc.Encode(map[string]any{"QMP": map[string]any{
			"version":      map[string]any{"qemu": map[string]int{"major": 10}, "package": ""},
			"capabilities": []string{},
		}})
		done := false
		for {
			var req map[string]any
			if dec.Decode(&req) != nil {
				return
			}
			if req["execute"] != "query-migrate" {
				_ = enc.Encode(map[string]any{"return": map[string]any{}})
				continue
			}
			status := "active"
			if done {
				status = "completed"
			}
			_ = enc.Encode(map[string]any{"return": map[string]any{"status": status}})
			if !done {
				<-fire
				done = true
				_ = enc.Encode(map[string]any{"event": "MIGRATION", "data": map[string]any{"status": "completed"},
					"timestamp": map[string]any{"seconds": 1, "microseconds": 0}})
			}
		}
	}()
}

// TestWaitMigrationWakesOnEvent: with WatchMigration, a MIGRATION event
// makes WaitMigration ask again at once: it returns the completed
// migration although its poll is an hour.
func TestWaitMigrationWakesOnEvent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	fire := make(chan struct{})
	fakeQMPMigration(t, sock, fire)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mon, err := Connect(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.WatchMigration(ctx); err != nil {
		t.Fatal(err)
	}
	type result struct {
		s   MigrationStatus
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := mon.WaitMigration(ctx, time.Hour, nil)
		res <- result{s, err}
	}()
	close(fire)
	r := <-res
	if r.err != nil || r.s.Status != "completed" {
		t.Fatalf("WaitMigration = %+v, %v; want completed", r.s, r.err)
	}
}
