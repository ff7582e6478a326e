package daemon

import (
	"os"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/runtime"
)

// criuOptions are the CRIU options of every checkpoint and restore of a
// vessel container. CRIU's network lock (iptables rules around the dump,
// and again around the restore, which follows the dump's method) costs
// ~150 ms of frozen time; vessel locks the network itself where it matters
// (a live migration takes the container's host veth down, see
// network.Manager.SetHostLink).
var criuOptions = []string{"network-lock skip"}

// setupCRIUConfig writes criuOptions to RUN/criu.conf and points
// CRIU_CONFIG_FILE at it, so every CRIU that runc and the shims start
// (they inherit the daemon's environment) reads it. Not runc's
// per-container "org.criu.config": CRIU 4.1.1 crashes parsing
// --network-lock from an RPC configuration file (it reads argv[optind]
// with a NULL argv); the environment's file is parsed with the real
// command line. It also makes RUN/empty, the empty directory masked
// directories are bind mounts of (see runtime.SpecOptions.EmptyDir).
func (d *Daemon) setupCRIUConfig() error {
	if err := os.MkdirAll(d.cfg.emptyDir(), 0o555); err != nil {
		return err
	}
	path := filepath.Join(d.cfg.RunDir, "criu.conf")
	if err := runtime.WriteCRIUConfig(path, criuOptions...); err != nil {
		return err
	}
	return os.Setenv("CRIU_CONFIG_FILE", path)
}
