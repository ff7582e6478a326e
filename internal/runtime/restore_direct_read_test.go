package runtime

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
)

func TestSetDirectRead(t *testing.T) {
	work := t.TempDir()
	opts := &rpc.CriuOpts{}
	if err := setDirectRead(opts, work); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(work, directReadConf)
	if opts.GetConfigFile() != conf {
		t.Fatalf("config file %q, want %q", opts.GetConfigFile(), conf)
	}
	b, err := os.ReadFile(conf)
	if err != nil || string(b) != "direct-read-pages\n" {
		t.Fatalf("config %q, %v", b, err)
	}
}

func TestDirectReadPagesProbe(t *testing.T) {
	// A CRIU that rejects the option (here: false(1)) is never asked.
	r := &Runtime{cfg: Config{Criu: "/bin/false", Log: slog.New(slog.DiscardHandler)}}
	if r.DirectReadPages() {
		t.Fatal("a criu without --direct-read-pages was taken for one")
	}
	if (&Runtime{}).DirectReadPages() {
		t.Fatal("no criu at all was taken for one with --direct-read-pages")
	}
}
