package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/vesselhost/vessel/internal/api"
)

// Exec runs a command in an instance and returns its exit code. The call
// returns when the command has exited and its output is written. stdio's
// streams are wired to the command's; its Resize changes (a terminal's)
// are forwarded until it is closed.
func (c *Client) Exec(ctx context.Context, name string, req api.ExecPost, stdio api.ExecIO) (int, error) {
	return c.session(ctx, "exec", name, req, stdio)
}

// Console attaches stdio to a running VM's serial console until ctx ends
// (the caller detaches) or the VM stops (then it returns nil).
func (c *Client) Console(ctx context.Context, name string, stdio api.ExecIO) error {
	_, err := c.session(ctx, "console", name, nil, stdio)
	if detached := ctx.Err() != nil; detached {
		err = nil // the session's error is the cancel's
	}
	return err
}

// session runs one websocket session of the exec framing (api.ExecPost)
// on the instance's route: first (when not nil) as its first message,
// then stdio both ways until the server's exit message.
func (c *Client) session(ctx context.Context, route, name string, first any, stdio api.ExecIO) (int, error) {
	url := "ws" + c.base[len("http"):] + "/1.0/instances/" + esc(name) + "/" + route
	conn, resp, err := c.ws.DialContext(ctx, url, nil)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			if _, derr := decodeResponse(resp, nil); derr != nil {
				return -1, derr
			}
		}
		return -1, fmt.Errorf("%s: %w", route, err)
	}
	defer conn.Close()
	if first != nil {
		if err := conn.WriteJSON(first); err != nil {
			return -1, err
		}
	}

	var wmu sync.Mutex
	write := func(mt int, data []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.WriteMessage(mt, data)
	}
	done := make(chan struct{})
	defer close(done)
	if stdio.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdio.Stdin.Read(buf)
				if n > 0 {
					if werr := write(websocket.BinaryMessage, append([]byte{api.StreamStdin}, buf[:n]...)); werr != nil {
						return
					}
				}
				if err != nil {
					_ = write(websocket.BinaryMessage, []byte{api.StreamStdin}) // EOF
					return
				}
			}
		}()
	} else {
		_ = write(websocket.BinaryMessage, []byte{api.StreamStdin})
	}
	if stdio.Resize != nil {
		go func() {
			for {
				select {
				case <-done:
					return
				case ws, ok := <-stdio.Resize:
					if !ok {
						return
					}
					b, _ := json.Marshal(api.ExecControl{Type: api.ExecResize, Width: ws.Width, Height: ws.Height})
					if write(websocket.TextMessage, b) != nil {
						return
					}
				}
			}
		}()
	}
	go func() {
		select {
		case <-ctx.Done():
			conn.Close()
		case <-done:
		}
	}()

	for {
		mt, data, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, fmt.Errorf("%s: connection lost before the server's exit message arrived: %w", route, err)
		}
		switch mt {
		case websocket.BinaryMessage:
			if len(data) < 1 {
				continue
			}
			var w io.Writer
			switch data[0] {
			case api.StreamStdout:
				w = stdio.Stdout
			case api.StreamStderr:
				w = stdio.Stderr
			}
			if w != nil {
				if _, err := w.Write(data[1:]); err != nil {
					return -1, err
				}
			}
		case websocket.TextMessage:
			var ctl api.ExecControl
			if err := json.Unmarshal(data, &ctl); err != nil {
				return -1, fmt.Errorf("%s: bad control message: %w", route, err)
			}
			switch ctl.Type {
			case api.ExecExit:
				return ctl.ExitCode, nil
			case api.ExecError:
				return -1, errors.New(ctl.Error)
			}
		}
	}
}
