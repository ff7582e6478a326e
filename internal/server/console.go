package server

import (
	"context"
	"io"
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
)

// consoleInstance attaches to a VM's serial console over a websocket:
// the exec framing (api.ExecPost's comment) without the first message;
// the server ends the session with an "exit" control message when the VM
// stops, or "error".
func (s *Server) consoleInstance(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	conn, err := s.upgradeRunning(w, r, name, func(inst api.Instance) error {
		if inst.Type != api.InstanceVM {
			return api.Errorf(api.ErrInvalid, "%q is a container: it has no serial console to attach to (its log: GET /1.0/instances/%s/logs)", name, name)
		}
		return nil
	})
	if err != nil || conn == nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()

	ws := &wsWriter{conn: conn}
	stdinR, stdinW := io.Pipe()
	go readClientFrames(conn, stdinW, nil, cancel)
	err = s.core.Console(ctx, name, api.ExecIO{Stdin: stdinR, Stdout: ws.stream(api.StreamStdout)})
	stdinR.Close()
	ws.end(0, err)
	return nil
}
