package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/vesselhost/vessel/internal/api"
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  32 << 10,
	WriteBufferSize: 32 << 10,
	// The API is reached over a root-only unix socket or mutually
	// authenticated TLS, never from a browser: any origin is fine.
	CheckOrigin: func(*http.Request) bool { return true },
}

// execInstance runs a command in an instance over a websocket; see
// api.ExecPost for the framing.
func (s *Server) execInstance(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	conn, err := s.upgradeRunning(w, r, name, nil)
	if err != nil || conn == nil {
		return err
	}
	defer conn.Close()

	var req api.ExecPost
	if err := conn.ReadJSON(&req); err != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()

	ws := &wsWriter{conn: conn}
	stdinR, stdinW := io.Pipe()
	resize := make(chan api.WindowSize, 4)
	go readClientFrames(conn, stdinW, resize, cancel)

	code, err := s.core.Exec(ctx, name, req, api.ExecIO{
		Stdin:  stdinR,
		Stdout: ws.stream(api.StreamStdout),
		Stderr: ws.stream(api.StreamStderr),
		Resize: resize,
	})
	stdinR.Close()
	ws.end(code, err)
	return nil
}

// upgradeRunning checks that instance name runs (and passes check, if
// given), then upgrades the request to a websocket whose messages are
// bounded by MaxExecFrame: a larger one fails the read (gorilla closes
// the session with 1009, message too big), which ends the session. A nil
// conn with a nil error means the upgrader has replied already.
func (s *Server) upgradeRunning(w http.ResponseWriter, r *http.Request, name string, check func(api.Instance) error) (*websocket.Conn, error) {
	inst, err := s.core.GetInstance(r.Context(), name)
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(inst); err != nil {
			return nil, err
		}
	}
	if inst.Status != api.StatusRunning {
		return nil, api.Errorf(api.ErrConflict, "instance %q is not running (%s)", name, strings.ToLower(inst.Status))
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil, nil //nolint:nilerr // the upgrader has replied to the client
	}
	conn.SetReadLimit(MaxExecFrame)
	return conn, nil
}

// readClientFrames reads a client's stdin frames into stdinW (an empty
// one closes it: end of input) and its resize messages into resize, until
// the connection breaks; then it closes stdinW and calls cancel (a broken
// connection ends the command or the console session).
func readClientFrames(conn *websocket.Conn, stdinW *io.PipeWriter, resize chan<- api.WindowSize, cancel func()) {
	defer cancel()
	defer stdinW.Close()
	for {
		mt, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		switch mt {
		case websocket.BinaryMessage:
			if len(data) == 0 || data[0] != api.StreamStdin {
				continue
			}
			if len(data) == 1 {
				stdinW.Close() // end of input
				continue
			}
			if _, err := stdinW.Write(data[1:]); err != nil {
				continue
			}
		case websocket.TextMessage:
			var c api.ExecControl
			if resize != nil && json.Unmarshal(data, &c) == nil && c.Type == api.ExecResize {
				select {
				case resize <- api.WindowSize{Width: c.Width, Height: c.Height}:
				default:
				}
			}
		}
	}
}

// wsWriter serialises writes to a websocket (gorilla allows one writer).
type wsWriter struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (w *wsWriter) stream(id byte) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		frame := make([]byte, len(p)+1)
		frame[0] = id
		copy(frame[1:], p)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err := w.conn.WriteMessage(websocket.BinaryMessage, frame); err != nil {
			return 0, fmt.Errorf("exec stream: %w", err)
		}
		return len(p), nil
	})
}

func (w *wsWriter) writeJSON(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.WriteJSON(v)
}

// end sends the session's last control message (the exit code, or the
// error that ended it) and closes the websocket normally.
func (w *wsWriter) end(code int, err error) {
	ctl := api.ExecControl{Type: api.ExecExit, ExitCode: code}
	if err != nil {
		ctl = api.ExecControl{Type: api.ExecError, ExitCode: -1, Error: err.Error()}
	}
	_ = w.writeJSON(ctl)
	_ = w.close()
}

func (w *wsWriter) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
