package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMigrationJournal(t *testing.T) {
	d := &Daemon{cfg: Config{Root: t.TempDir()}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if got := d.journals(); len(got) != 0 {
		t.Fatalf("journals of a fresh root: %v", got)
	}
	src := migrationJournal{Role: journalSource, Peer: "fp", Name: "c2", Live: true, Start: true,
		Phase: journalTransfer, PageServer: "127.0.0.1:1234", Started: time.Now().UTC().Truncate(time.Second)}
	if err := d.writeJournal("c1", src, false); err != nil {
		t.Fatal(err)
	}
	// A phase change replaces the file whole.
	src.Phase = journalRestoring
	if err := d.writeJournal("c1", src, false); err != nil {
		t.Fatal(err)
	}
	tgt := migrationJournal{Role: journalTarget, Peer: "alpha", Name: "c3", Phase: journalTransfer}
	if err := d.writeJournal("c3", tgt, true); err != nil {
		t.Fatal(err)
	}
	got := d.journals()
	if len(got) != 2 || got["c1"] != src || got["c3"] != tgt {
		t.Fatalf("journals = %+v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(d.cfg.journalDir(), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	// An unreadable journal is reported and skipped, not fatal.
	if err := os.WriteFile(d.cfg.journalPath("bad"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := d.journals(); len(got) != 2 {
		t.Fatalf("journals with a corrupt one: %v", got)
	}
	d.removeJournal("c1")
	d.removeJournal("c1") // twice is fine
	if _, ok := d.readJournal("c1"); ok {
		t.Fatal("journal still there after remove")
	}
}

func TestAnyTraced(t *testing.T) {
	if anyTraced([]int{os.Getpid()}) {
		t.Skip("the test runs under a tracer")
	}
	if anyTraced([]int{1 << 30}) {
		t.Fatal("a pid that does not exist counts as traced")
	}
}
