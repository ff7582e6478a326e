package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Version is the version of the shim's on-disk formats (Config and
// ExitRecord). A reader refuses a file with a newer version.
const Version = 1

// Names of the files in a container's state directory.
const (
	// ConfigFile is the shim's configuration, written by the daemon.
	ConfigFile = "shim.json"
	// ShimPidFile holds the shim's pid, written by the shim once it runs.
	ShimPidFile = "shim.pid"
	// InitPidFile holds the container init's host pid, written by runc
	// (--pid-file).
	InitPidFile = "init.pid"
	// ExitFile is the ExitRecord, written by the shim when init has exited.
	ExitFile = "exit.json"
	// RuncLogFile is runc's own JSON log for the run or restore command.
	RuncLogFile = "runc.log"
	// DefaultLogFile is the container's console log when Config.LogPath is
	// empty.
	DefaultLogFile = "console.log"
)

// ReportFd is the file descriptor on which the shim writes its Report. The
// daemon passes a pipe there (os/exec ExtraFiles[0]).
const ReportFd = 3

// For a direct restore (RestoreConfig.Direct), CriuFd and NetnsFd are
// CRIU's end of its RPC socket and the container's network namespace,
// which the shim passes on to criu swrk as its fds 3 and 4, and InitFd
// the read end of a pipe on which the daemon writes init's pid (decimal)
// once CRIU has restored the tasks, or which it closes on a failure.
const (
	CriuFd  = 4
	NetnsFd = 5
	InitFd  = 6
)

// DefaultLogMax is the size at which the console log is rotated when
// Config.LogMax is zero.
const DefaultLogMax = 1 << 20

// Action says how the shim brings the container up.
type Action string

// Actions.
const (
	// ActionCreate runs a new container: runc run --detach.
	ActionCreate Action = "create"
	// ActionRestore restores a checkpointed container: CRIU, driven by the
	// daemon (RestoreConfig).
	ActionRestore Action = "restore"
)

// Config is the shim's configuration file (ConfigFile). The state directory
// is the directory the file is in.
type Config struct {
	Version int    `json:"version"`
	Action  Action `json:"action"`
	// ID is the container's runc id.
	ID string `json:"id"`
	// Bundle is the OCI bundle directory holding config.json.
	Bundle string `json:"bundle"`
	// Runc is the runc binary, Root its --root.
	Runc string `json:"runc"`
	Root string `json:"root"`
	// Criu is the criu binary a restore runs.
	Criu string `json:"criu,omitempty"`
	// LogPath is the console log; LogMax its rotation size in bytes.
	LogPath string `json:"log_path"`
	LogMax  int64  `json:"log_max"`
	// Restore holds the restore parameters when Action is ActionRestore.
	Restore *RestoreConfig `json:"restore,omitempty"`
}

// RestoreConfig describes a restore. There is no runc in it: the shim
// starts `criu swrk` at once and reports its pid (Report.CriuPid); the
// daemon drives the restore over the socket (CriuFd) and sends init's pid
// on InitFd. The restored init is the shim's child (CRIU's rst_sibling).
type RestoreConfig struct {
	ImagePath string `json:"image_path"`
	WorkPath  string `json:"work_path"`
}

// Report is what the shim writes on ReportFd once runc has returned: either
// the container init's pid or runc's error message.
type Report struct {
	// CriuPid comes first, alone, from a direct restore's shim once CRIU
	// runs; the final report follows.
	CriuPid int    `json:"criu_pid,omitempty"`
	InitPid int    `json:"init_pid,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ExitRecord is the ExitFile: how the container's init ended.
type ExitRecord struct {
	Version int `json:"version"`
	// Status is the exit code, or 128+signal number when init was killed.
	Status int `json:"status"`
	// Signal names the signal that killed init ("SIGKILL"), or is empty.
	Signal string    `json:"signal"`
	Time   time.Time `json:"time"`
}

// Errors about the state directory's files.
var (
	// ErrVersion says a file was written by a newer shim.
	ErrVersion = errors.New("unsupported shim file version")
	// ErrConfig says the shim's configuration is incomplete.
	ErrConfig = errors.New("invalid shim config")
)

// Validate checks that c names everything the shim needs.
func (c *Config) Validate() error {
	switch {
	case c.Version > Version:
		return fmt.Errorf("%w: config version %d", ErrVersion, c.Version)
	case c.ID == "" || c.Bundle == "" || c.Runc == "" || c.Root == "" || c.LogPath == "":
		return fmt.Errorf("%w: id, bundle, runc, root and log_path are required", ErrConfig)
	case c.Action == ActionCreate:
		return nil
	case c.Action == ActionRestore:
		if c.Restore == nil || c.Restore.ImagePath == "" {
			return fmt.Errorf("%w: restore needs an image path", ErrConfig)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown action %q", ErrConfig, c.Action)
	}
}

// ReadConfig reads and validates a ConfigFile.
func ReadConfig(path string) (*Config, error) {
	var c Config
	if err := readJSON(path, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// WriteConfig writes c into dir/ConfigFile atomically.
func WriteConfig(dir string, c *Config) error {
	return WriteFileAtomic(filepath.Join(dir, ConfigFile), c)
}

// ReadExit reads a state directory's ExitFile. A missing file gives an error
// wrapping fs.ErrNotExist.
func ReadExit(dir string) (ExitRecord, error) {
	var e ExitRecord
	if err := readJSON(filepath.Join(dir, ExitFile), &e); err != nil {
		return ExitRecord{}, err
	}
	if e.Version > Version {
		return ExitRecord{}, fmt.Errorf("%s: %w: %d", ExitFile, ErrVersion, e.Version)
	}
	return e, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// WriteFileAtomic writes v as JSON to path through a temporary file in the
// same directory (mode 0600), synced and renamed over path, so readers see
// either the old or the new content.
func WriteFileAtomic(path string, v any) error { return WriteJSONAtomic(path, v, true) }

// WriteJSONAtomic is WriteFileAtomic with the fsync optional: without it
// the file is whole for any reader and survives a crash of the writer, not
// one of the host.
func WriteJSONAtomic(path string, v any, durable bool) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteBytesAtomic(path, append(b, '\n'), 0o600, durable)
}

// WriteBytesAtomic writes b to path through a temporary file in the same
// directory (mode perm), synced if durable, and renamed over path.
func WriteBytesAtomic(path string, b []byte, perm os.FileMode, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// RuncHasState reports whether runc (with --root root) may have a container
// id: runc keeps each container's state in ROOT/ID/state.json, and without
// that file `runc state` answers "does not exist". An error other than "not
// there" counts as maybe (the caller then asks runc).
func RuncHasState(root, id string) bool {
	_, err := os.Stat(filepath.Join(root, id, "state.json"))
	return !errors.Is(err, os.ErrNotExist)
}
