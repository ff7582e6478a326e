package runtime

import (
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// A cold restore (RestoreOptions.DirectRead: a snapshot's images on disk)
// has CRIU read the memory pages with O_DIRECT (--direct-read-pages,
// vessel's CRIU patch 0021): straight from the device into the restored
// tasks' memory, in 16 MiB pieces each populated first, instead of through
// the page cache (allocate, fill, copy out of and reclaim a page-cache copy
// of every page). On this project's 2-core VM that took a cold 1 GiB read
// from ~1.2 CPU-s to ~0.4, which is what made the restore rate hold up
// when other work shares the CPUs. A migration's images were just written
// and are still in the page cache: those are read through it, as before.

// directReadConf is the name of the restore's CRIU config file in the
// work directory.
const directReadConf = "restore-direct-read.conf"

// DirectReadPages reports whether Criu can read a restore's pages with
// O_DIRECT (it knows --direct-read-pages). Probed once.
func (r *Runtime) DirectReadPages() bool {
	return r.criuHas("--direct-read-pages", "criu reads a snapshot's pages through the page cache (no --direct-read-pages: run setup)")
}

// setDirectRead turns on O_DIRECT page reads for a restore whose CRIU
// writes its log into work (the RPC request has no field for it: a config
// file does it).
func setDirectRead(opts *rpc.CriuOpts, work string) error {
	conf := filepath.Join(work, directReadConf)
	if err := os.WriteFile(conf, []byte("direct-read-pages\n"), 0o600); err != nil {
		return err
	}
	opts.ConfigFile = proto.String(conf)
	return nil
}
