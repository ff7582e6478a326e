package server

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/vesselhost/vessel/internal/api"
)

// consoleInstance attaches to a VM's serial console over a websocket:
// the exec framing (api.ExecPost's comment) without the first message;
// the server ends the session with an "exit" control message when the VM
// stops, or "error".
func (s *Server) consoleInstance(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	inst, err := s.core.GetInstance(r.Context(), name)
	if err != nil {
		return err
	}
	if inst.Type != api.InstanceVM {
		return api.Errorf(api.ErrInvalid, "%q is a container: it has no serial console to attach to (its log: GET /1.0/instances/%s/logs)", name, name)
	}
	if inst.Status != api.StatusRunning {
		return api.Errorf(api.ErrConflict, "instance %q is not running (%s)", name, strings.ToLower(inst.Status))
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // the upgrader has replied
	}
	defer conn.Close()
	conn.SetReadLimit(MaxExecFrame)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()

	ws := &wsWriter{conn: conn}
	stdinR, stdinW := io.Pipe()
	go readClientFrames(conn, stdinW, nil, cancel)
	err = s.core.Console(ctx, name, api.ExecIO{Stdin: stdinR, Stdout: ws.stream(api.StreamStdout)})
	stdinR.Close()
	ctl := api.ExecControl{Type: api.ExecExit}
	if err != nil {
		ctl = api.ExecControl{Type: api.ExecError, ExitCode: -1, Error: err.Error()}
	}
	_ = ws.writeJSON(ctl)
	_ = ws.close()
	return nil
}
