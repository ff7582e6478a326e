package runtime

import "errors"

// Errors returned by the runtime, wrapped with what was being done and, for
// failed tools, their error output.
var (
	// ErrInvalid says options or configuration are unusable.
	ErrInvalid = errors.New("invalid runtime options")
	// ErrNotFound says no container with that id is known.
	ErrNotFound = errors.New("container not found")
	// ErrExists says a container with that id already exists.
	ErrExists = errors.New("container already exists")
	// ErrNotRunning says the container has no running init.
	ErrNotRunning = errors.New("container not running")
	// ErrStart says the shim could not start or restore a container.
	ErrStart = errors.New("start container")
	// ErrRunc says a runc command failed.
	ErrRunc = errors.New("runc failed")
	// ErrCheckpoint says runc/CRIU could not checkpoint a container.
	ErrCheckpoint = errors.New("checkpoint container")
	// ErrNoCRIU says no CRIU binary is configured or found.
	ErrNoCRIU = errors.New("criu not available")
	// ErrNotDumpable says a container's processes are in a state CRIU
	// could dump but not restore (see CheckDumpable).
	ErrNotDumpable = errors.New("container cannot be checkpointed")
)
