package shim

import (
	"io"
	"os"
	"os/exec"
)

// stdio is the container's standard I/O as handed to runc: /dev/null as
// stdin and the write ends of two pipes whose read ends the shim copies into
// the console log. It implements go-runc's IO interface.
type stdio struct {
	null, stdout, stderr *os.File
}

// openStdio creates the pipes and starts one copier per pipe.
func (s *shim) openStdio() (*stdio, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	sio := &stdio{null: null}
	for _, w := range []**os.File{&sio.stdout, &sio.stderr} {
		r, pw, err := os.Pipe()
		if err != nil {
			sio.Close()
			return nil, err
		}
		*w = pw
		s.copiers.Add(1)
		go func() {
			defer s.copiers.Done()
			defer r.Close()
			copyInto(s.log, r)
		}()
	}
	return sio, nil
}

// Set makes cmd use the container's stdio.
func (i *stdio) Set(cmd *exec.Cmd) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = i.null, i.stdout, i.stderr
}

// Close closes the shim's copies of the container's stdio.
func (i *stdio) Close() error {
	for _, f := range []*os.File{i.null, i.stdout, i.stderr} {
		if f != nil {
			f.Close()
		}
	}
	return nil
}

// Stdin is unused: the container's stdin is /dev/null.
func (i *stdio) Stdin() io.WriteCloser { return nil }

// Stdout is unused: the shim reads the pipe itself.
func (i *stdio) Stdout() io.ReadCloser { return nil }

// Stderr is unused: the shim reads the pipe itself.
func (i *stdio) Stderr() io.ReadCloser { return nil }
