package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	gorunc "github.com/containerd/go-runc"

	"github.com/vesselhost/vessel/internal/shim"
)

// Config says which tools the runtime uses and where it keeps state.
type Config struct {
	// Runc is the runc binary (default: the first of DefaultRunc that
	// exists). vessel needs runc 1.3 or later: earlier ones join an
	// unprivileged container's user namespace before its network namespace,
	// which the host owns, so exec fails.
	Runc string
	// Criu is the criu binary for checkpoint and restore (default: the
	// first of DefaultCriu that exists; without one Checkpoint and Restore
	// fail with ErrNoCRIU).
	Criu string
	// Shim is the vessel-shim binary (default: the first of DefaultShim
	// that exists: next to os.Executable(), the package's, then PATH).
	Shim string
	// Root is runc's --root, one per daemon, e.g. /run/vessel/runc.
	// Required.
	Root string
	// StateDir holds the shims' state directories, StateDir/<id>.
	// Required.
	StateDir string
	// ShimCgroup, if set, is the cgroup a shim is moved into once its
	// container runs. Until then the shim, and the runc it starts, stay in
	// the caller's cgroup (a daemon's control cgroup: starting is control
	// work); afterwards the shim copies console output, which is data path.
	ShimCgroup string
	// Log receives warnings (default: discarded).
	Log *slog.Logger
}

// Runtime runs containers under shims. It holds no per-container state in
// memory: everything is in runc's root and the state directories, so a new
// Runtime (after a daemon restart) sees the containers of the previous one.
type Runtime struct {
	cfg  Config
	runc *gorunc.Runc

	usernsMu sync.Mutex
	userns   map[IDMap]*os.File // PrepareIDMap's user namespaces
	yardOnce sync.Once
	yard     string // CRIU's cgroup yard (cgroupYard)

	criuOptsMu sync.Mutex
	criuOpts   map[string]bool // the options of vessel's patches Criu has (criuHas)
}

// Status is a container's state as runc reports it.
type Status string

// Statuses. StatusUnknown means runc does not know the container.
const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
	StatusUnknown Status = ""
)

// Process names the processes of a started container, by host pid.
type Process struct {
	ShimPid int
	InitPid int
}

// New checks cfg, fills in defaults and creates Root and StateDir.
func New(cfg Config) (*Runtime, error) {
	if cfg.Root == "" || cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: runtime needs a runc root and a state directory", ErrInvalid)
	}
	var err error
	for _, p := range []*string{&cfg.Root, &cfg.StateDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := os.MkdirAll(*p, 0o700); err != nil {
			return nil, fmt.Errorf("create runtime directory: %w", err)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Runc == "" {
		cfg.Runc = DefaultRuncPath()
	}
	if cfg.Runc, err = lookTool(cfg.Runc, "runc"); err != nil {
		return nil, err
	}
	if cfg.Shim == "" {
		cfg.Shim = DefaultShimPath()
	}
	if cfg.Shim, err = lookTool(cfg.Shim, "vessel-shim"); err != nil {
		return nil, err
	}
	if cfg.Criu != "" {
		if cfg.Criu, err = lookTool(cfg.Criu, "criu"); err != nil {
			return nil, err
		}
	} else {
		cfg.Criu, _ = lookTool(DefaultCriuPath(), "criu") // optional
	}
	return &Runtime{
		cfg:  cfg,
		runc: &gorunc.Runc{Command: cfg.Runc, Root: cfg.Root},
	}, nil
}

// lookTool resolves path (or def when path is empty) to an absolute path of
// an executable.
func lookTool(path, def string) (string, error) {
	if path == "" {
		path = def
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrInvalid, def, err)
	}
	return filepath.Abs(p)
}

// DefaultRunc lists where vessel looks for runc, in order: its package's
// copy, setup.sh's build, then PATH.
var DefaultRunc = []string{"/usr/lib/vessel/runc", "/usr/local/lib/vessel/runc", "runc"}

// DefaultCriu lists where vessel looks for criu, in order: its package's
// copy of vessel's patched CRIU (beside a distribution's criu, which it
// does not replace), then PATH (setup.sh installs into /usr/local/sbin).
var DefaultCriu = []string{"/usr/lib/vessel/criu", "criu"}

// DefaultShim lists where vessel looks for vessel-shim after the directory
// of the running executable (a build tree's bin/): its package's copy,
// then PATH.
var DefaultShim = []string{"/usr/lib/vessel/vessel-shim", "vessel-shim"}

// DefaultRuncPath is the runc vessel uses when none is configured.
func DefaultRuncPath() string { return firstFile(DefaultRunc) }

// DefaultCriuPath is the criu vessel uses when none is configured.
func DefaultCriuPath() string { return firstFile(DefaultCriu) }

// DefaultShimPath is the vessel-shim vessel uses when none is configured:
// the one next to the running executable, else the first of DefaultShim.
func DefaultShimPath() string {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "vessel-shim"); isExecutable(p) {
			return p
		}
	}
	return firstFile(DefaultShim)
}

// firstFile returns the first of paths (all but the last absolute) that is
// a regular file, else the last, a name to look up in PATH.
func firstFile(paths []string) string {
	for _, p := range paths[:len(paths)-1] {
		if isExecutable(p) {
			return p
		}
	}
	return paths[len(paths)-1]
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// idPattern is runc's rule for container ids.
var idPattern = regexp.MustCompile(`^[\w+\-.]+$`)

func validID(id string) bool {
	return idPattern.MatchString(id) && id != "." && id != ".."
}

// dir is the state directory of container id.
func (r *Runtime) dir(id string) string {
	return filepath.Join(r.cfg.StateDir, id)
}

// LogPath returns the console log of container id: the path its shim was
// configured with, or the default StateDir/<id>/console.log.
func (r *Runtime) LogPath(id string) string {
	if c, err := shim.ReadConfig(filepath.Join(r.dir(id), shim.ConfigFile)); err == nil {
		return c.LogPath
	}
	return filepath.Join(r.dir(id), shim.DefaultLogFile)
}

// State asks runc for the container's status and init pid. A container runc
// does not know has StatusUnknown and no error.
func (r *Runtime) State(ctx context.Context, id string) (Status, int, error) {
	if !validID(id) {
		return StatusUnknown, 0, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if !shim.RuncHasState(r.cfg.Root, id) {
		// No state file: runc does not know it, and asking it would
		// cost an exec (a daemon start asks for every instance).
		return StatusUnknown, 0, nil
	}
	c, err := r.runc.State(ctx, id)
	if err != nil {
		if notExist(err) {
			return StatusUnknown, 0, nil
		}
		return StatusUnknown, 0, fmt.Errorf("%w: state of %s: %w", ErrRunc, id, err)
	}
	return Status(c.Status), c.Pid, nil
}

// notExist tells whether a runc error says the container does not exist
// (runc has no exit code for it, only the message).
func notExist(err error) bool {
	return strings.Contains(err.Error(), "does not exist")
}
