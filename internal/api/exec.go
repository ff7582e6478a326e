package api

import "io"

// ExecPost is the first (text) message a client sends on the exec websocket
// (GET /1.0/instances/NAME/exec). After it, frames are:
//
//   - binary, first byte a stream id (StreamStdin from the client;
//     StreamStdout/StreamStderr from the server), then data. An empty
//     stdin frame means end of input.
//   - text: an ExecControl JSON message (client: "resize"; server: "exit"
//     as the last message, or "error" if the command could not run).
type ExecPost struct {
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// Interactive allocates a terminal; stdout and stderr are then merged.
	Interactive bool   `json:"interactive"`
	Width       uint16 `json:"width,omitempty"`
	Height      uint16 `json:"height,omitempty"`
}

// Exec stream ids.
const (
	StreamStdin  byte = 0
	StreamStdout byte = 1
	StreamStderr byte = 2
)

// ExecControl types.
const (
	ExecResize = "resize"
	ExecExit   = "exit"
	ExecError  = "error"
)

// ExecControl is a text message on the exec websocket.
type ExecControl struct {
	Type     string `json:"type"`
	Width    uint16 `json:"width,omitempty"`
	Height   uint16 `json:"height,omitempty"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// WindowSize is a terminal size in character cells.
type WindowSize struct {
	Width, Height uint16
}

// ExecIO is the local plumbing of one exec, not a wire type: the streams
// of the command and, for a terminal, its size changes. The client fills
// it from its terminal; the server from the websocket, and hands it to the
// daemon.
type ExecIO struct {
	// Stdin feeds the command; nil means no input.
	Stdin io.Reader
	// Stdout and Stderr receive its output (merged into Stdout with a
	// terminal).
	Stdout, Stderr io.Writer
	// Resize carries terminal size changes while the command runs.
	Resize <-chan WindowSize
}
