package agent

// The ops a request names.
const (
	opPing = "ping"
	opExec = "exec"
	opPush = "push"
	opPull = "pull"
)

// request is the header frame a client opens a stream with.
type request struct {
	Version int    `json:"version"`
	Op      string `json:"op"`
	// exec
	Exec *execRequest `json:"exec,omitempty"`
	// push, pull
	File *fileRequest `json:"file,omitempty"`
}

// response is the header frame a server answers a request with. Error
// set means the op was refused or failed; nothing follows then.
type response struct {
	Version int    `json:"version"`
	Error   string `json:"error,omitempty"`
	// ping
	Info *Info `json:"info,omitempty"`
	// pull
	File *FileInfo `json:"file,omitempty"`
}

// Info describes the guest, as a ping answers.
type Info struct {
	// AgentVersion is vessel-agent's version.
	AgentVersion string `json:"agent_version"`
	// Kernel is the guest kernel's release (uname -r).
	Kernel string `json:"kernel"`
	// Uptime is the guest's time since boot, in seconds (CLOCK_BOOTTIME).
	Uptime float64 `json:"uptime"`
	// ReadyAfter is the guest's uptime, in seconds, when the agent began
	// serving: the guest kernel's boot to a ready agent.
	ReadyAfter float64 `json:"ready_after"`
	// Init is the command the agent's init switched the root to.
	Init string `json:"init,omitempty"`
	// SessionStreams counts the streams the session has accepted, this
	// ping's included: 1 when the ping is a fresh session's first request.
	SessionStreams uint64 `json:"session_streams"`
}

// execRequest is an exec's request.
type execRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// UID and GID, when set, are the process's credentials (with no
	// supplementary groups); unset, it runs as the agent (root).
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	TTY bool    `json:"tty,omitempty"`
	// Width and Height are the terminal's size (TTY only).
	Width  uint16 `json:"width,omitempty"`
	Height uint16 `json:"height,omitempty"`
}

// ExitStatus is how an exec's process ended.
type ExitStatus struct {
	// Code is its exit code; 128+Signal when a signal killed it, as a
	// shell reports it; 126 when the command could not be run, 127 when
	// it was not found (the message went to its stderr).
	Code int `json:"code"`
	// Signal is the signal that killed it, or 0.
	Signal int `json:"signal,omitempty"`
}

// fileRequest is a push's or a pull's request.
type fileRequest struct {
	// Path is absolute, inside the guest's root.
	Path string `json:"path"`
	// Mode, UID and GID are the pushed file's (push only).
	Mode uint32 `json:"mode,omitempty"`
	UID  uint32 `json:"uid,omitempty"`
	GID  uint32 `json:"gid,omitempty"`
}

// FileInfo is a pulled file's metadata.
type FileInfo struct {
	Mode uint32 `json:"mode"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size int64  `json:"size"`
}
