package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ExecOptions is a command to run in the guest; its fields mean what
// runtime.ExecOptions' do for a container.
type ExecOptions struct {
	// Args is the command; Args[0] is looked up in the guest's PATH.
	Args []string
	// Env is the command's environment (PATH, HOME and TERM default).
	Env []string
	// Cwd is its directory in the guest (default "/").
	Cwd string
	// UID and GID, when set, are its credentials; unset, it runs as root.
	UID, GID *uint32
	// TTY runs it on a terminal of Width x Height (default 80x24); Stderr
	// is unused then.
	TTY           bool
	Width, Height uint16
	// Stdin feeds it; nil means no input (EOF at once). Without a TTY its
	// EOF reaches the command as EOF.
	Stdin io.Reader
	// Stdout and Stderr receive its output; nil discards it.
	Stdout, Stderr io.Writer
	// Resize changes the terminal's size while it runs (TTY only).
	Resize <-chan WinSize
}

// WinSize is a terminal size in character cells.
type WinSize struct {
	Width, Height uint16
}

// Exec runs a command in the guest and returns how it ended: a non-zero
// exit code is not an error, nor is a command that cannot run (126, 127).
// It returns once the command exited and its output reached EOF. When ctx
// ends, the command is killed and Exec fails with ctx's error. Exec does
// not wait for Stdin: a copier blocked in Stdin.Read ends at its next read.
func (c *Client) Exec(ctx context.Context, o ExecOptions) (ExitStatus, error) {
	if len(o.Args) == 0 {
		return ExitStatus{}, errors.New("agent: exec: no command")
	}
	s, done, err := c.open(ctx, request{Op: opExec, Exec: &execRequest{
		Args: o.Args, Env: o.Env, Cwd: o.Cwd, UID: o.UID, GID: o.GID,
		TTY: o.TTY, Width: o.Width, Height: o.Height,
	}})
	if err != nil {
		return ExitStatus{}, err
	}
	defer done()
	if _, err := c.answer(ctx, s); err != nil {
		return ExitStatus{}, err
	}
	ended := make(chan struct{})
	defer close(ended)
	go sendStdin(s.fw, o.Stdin, ended)
	if o.Resize != nil {
		go sendResizes(s.fw, o.Resize, ended)
	}
	for {
		t, b, err := s.fr.next()
		if err != nil {
			return ExitStatus{}, c.failed(ctx, unexpected(err))
		}
		switch t {
		case frameStdout:
			write(o.Stdout, b)
		case frameStderr:
			write(o.Stderr, b)
		case frameExit:
			var st ExitStatus
			if err := json.Unmarshal(b, &st); err != nil {
				return ExitStatus{}, fmt.Errorf("agent: exit frame: %w", err)
			}
			return st, nil
		}
	}
}

// write passes output on; a failing writer does not stop the command (its
// output is dropped), as a closed terminal does not stop a container's.
func write(w io.Writer, b []byte) {
	if w != nil && len(b) > 0 {
		_, _ = w.Write(b)
	}
}

// sendStdin relays r as stdin frames, then an EOF frame.
func sendStdin(fw *frameWriter, r io.Reader, ended <-chan struct{}) {
	if r == nil {
		_ = fw.frame(frameStdin, nil)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		select {
		case <-ended:
			return
		default:
		}
		if n > 0 {
			if fw.frame(frameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = fw.frame(frameStdin, nil)
			return
		}
	}
}

func sendResizes(fw *frameWriter, in <-chan WinSize, ended <-chan struct{}) {
	for {
		select {
		case <-ended:
			return
		case ws, ok := <-in:
			if !ok {
				return
			}
			var b [4]byte
			binary.BigEndian.PutUint16(b[:], ws.Width)
			binary.BigEndian.PutUint16(b[2:], ws.Height)
			if fw.frame(frameResize, b[:]) != nil {
				return
			}
		}
	}
}
