package security

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/testhost"
)

// The client-facing and default-limit attacks: a tenant exhausting the
// host from inside a container that sets no limits, and a client (or
// anyone reaching the HTTPS address) exhausting the API server.

// bound is the generous limit on waits for something the server or the
// kernel does eventually; reaching it means the defence is missing.
const bound = 2 * time.Minute

func newHostWith(t *testing.T, extra ...string) *host {
	return &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: extra}), t: t}
}

// eventually polls cond every 200 ms until it holds or bound passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDefaultLimitsFromHost: a container that sets no limits runs with the
// host's default process and memory limits, and vessel info says so.
func TestDefaultLimitsFromHost(t *testing.T) {
	h := newHost(t)
	def := h.ServerInfo().Host.DefaultLimits
	if def["limits.processes"] == "" || def["limits.memory"] == "" {
		t.Fatalf("host info shows default limits %v, want processes and memory", def)
	}
	h.OK("launch", "busybox", "c1")
	if got := h.CgroupFile("c1", "pids", "pids.max"); got != def["limits.processes"] {
		t.Errorf("pids.max = %s, want the default %s", got, def["limits.processes"])
	}
	mib, _ := strconv.ParseInt(strings.TrimSuffix(def["limits.memory"], "MiB"), 10, 64)
	memFile := "memory.limit_in_bytes"
	if cgroups.HostVersion() == cgroups.V2 {
		memFile = "memory.max"
	}
	if got := h.CgroupFile("c1", "memory", memFile); got != strconv.FormatInt(mib<<20, 10) {
		t.Errorf("%s = %s, want the default %s", memFile, got, def["limits.memory"])
	}
	if out := h.OK("info", "c1"); !strings.Contains(out, def["limits.memory"]+" (host default)") {
		t.Errorf("info does not show the default memory limit:\n%s", out)
	}
	// A value the user sets wins; unlimited lifts the default.
	h.OK("config", "set", "c1", "limits.processes=unlimited")
	if got := h.CgroupFile("c1", "pids", "pids.max"); got != "max" {
		t.Errorf("limits.processes=unlimited: pids.max = %s", got)
	}
	h.OK("delete", "--force", "c1")
}

// TestForkBomb: a fork bomb in a container that sets no limits stops at
// the default process limit; the host keeps answering, and a forced stop
// reclaims everything.
func TestForkBomb(t *testing.T) {
	const limit = 300 // the host default here, small to spare the shared test machine
	h := newHostWith(t, "--default-limit", "limits.processes="+strconv.Itoa(limit))
	h.OK("launch", "busybox", "bomb")
	// The classic bomb, run by an exec that lasts until the stop below.
	execDone := make(chan testhost.Result, 1)
	go func() { execDone <- h.Vessel("exec", "bomb", "--", "sh", "-c", `b() { b | b & }; b; sleep 100000`) }()
	// The kernel refuses forks at the default limit: pids.events counts
	// them, and the cgroup never holds more tasks than the limit.
	refused := func() bool {
		ev := h.CgroupFile("bomb", "pids", "pids.events")
		return strings.HasPrefix(ev, "max ") && ev != "max 0"
	}
	eventually(t, "forks refused at the default pids limit", refused)
	if n, _ := strconv.Atoi(h.CgroupFile("bomb", "pids", "pids.current")); n > limit {
		t.Errorf("pids.current = %d, beyond the default %d", n, limit)
	}
	if got := h.CgroupFile("bomb", "pids", "pids.max"); got != strconv.Itoa(limit) {
		t.Errorf("pids.max = %s, want the default %d", got, limit)
	}
	// The host is responsive: the API answers while the bomb runs.
	h.OK("list")
	if inst := h.Instance("bomb"); inst.State == nil || inst.State.Processes == 0 || inst.State.Processes > limit {
		t.Errorf("info while the bomb runs: %+v", inst.State)
	}
	h.OK("stop", "--force", "bomb")
	<-execDone // the bomb's exec ends with its container
	// Reclaimed: no task of the bomb is left (its cgroup is gone or empty).
	pidsDir := filepath.Join("/sys/fs/cgroup", h.CgroupParent(), "bomb")
	if cgroups.HostVersion() != cgroups.V2 {
		pidsDir = filepath.Join("/sys/fs/cgroup", "pids", h.CgroupParent(), "bomb")
	}
	if b, err := os.ReadFile(filepath.Join(pidsDir, "cgroup.procs")); err == nil && len(bytes.TrimSpace(b)) > 0 {
		t.Errorf("tasks left after the forced stop: %s", b)
	}
	if inst := h.Instance("bomb"); inst.Status != api.StatusStopped {
		t.Errorf("after a forced stop: %s", inst.Status)
	}
	h.OK("delete", "bomb")
}

// TestMemoryHog: a container that sets no memory limit and allocates
// without end is OOM-killed in its own cgroup at the default ceiling; the
// container and the host keep running.
func TestMemoryHog(t *testing.T) {
	h := newHostWith(t, "--default-limit", "limits.memory=64MiB")
	h.OK("launch", "busybox", "hog")
	r := h.Vessel("exec", "hog", "--", "awk", `BEGIN { s = "x"; for (;;) s = s s }`)
	if r.Code != 137 {
		t.Errorf("allocation beyond the default ceiling: %s (want killed, exit 137)", r)
	}
	inst := h.Instance("hog")
	if inst.Status != api.StatusRunning || inst.State == nil || inst.State.OOMKills < 1 || inst.State.MemoryLimit != 64<<20 {
		t.Errorf("after the hog: status %s, state %+v; want running, OOM kills, limit 64MiB", inst.Status, inst.State)
	}
	h.OK("delete", "--force", "hog")
}

// unixClient is an HTTP client of the host's API socket.
func (h *host) unixClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket())
	}}}
}

// TestOversizedJSONBody: a control request with a body over 1 MiB is
// refused with 413, and nothing is created.
func TestOversizedJSONBody(t *testing.T) {
	h := newHost(t)
	body := `{"name":"big","source":{"image":"busybox"},"config":{"user.pad":"` + strings.Repeat("a", 2<<20) + `"}}`
	resp, err := h.unixClient().Post("http://vessel/1.0/instances", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env api.Response
	_ = json.NewDecoder(resp.Body).Decode(&env)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(env.Error, "larger than") {
		t.Errorf("status %d, error %q; want 413 naming the limit", resp.StatusCode, env.Error)
	}
	if out := h.OK("list", "--format", "csv"); strings.Contains(out, "big") {
		t.Errorf("the oversized request created an instance:\n%s", out)
	}
}

// TestDurationOverflow: seconds that would overflow time.Duration are
// refused with 400 (a stop timeout, a token lifetime).
func TestDurationOverflow(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	c := h.unixClient()
	for _, req := range []struct{ method, path, body, want string }{
		{"PUT", "/1.0/instances/c1/state", `{"action":"stop","timeout":9223372036854775807}`, "stop timeout"},
		{"PUT", "/1.0/instances/c1/state", `{"action":"stop","timeout":-5}`, "stop timeout"},
		{"POST", "/1.0/tokens", `{"name":"x","ttl_seconds":9223372036854775807}`, "token lifetime"},
	} {
		r, _ := http.NewRequest(req.method, "http://vessel"+req.path, strings.NewReader(req.body))
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		var env api.Response
		_ = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(env.Error, req.want) {
			t.Errorf("%s %s %s: %d %q, want 400 about the %s", req.method, req.path, req.body, resp.StatusCode, env.Error, req.want)
		}
	}
	// The stop with an overflowing timeout did not happen.
	if out := h.OK("info", "c1"); !strings.Contains(out, "Running") {
		t.Errorf("after refused stops:\n%s", out)
	}
	h.OK("delete", "--force", "c1")
}

// TestExecFrameTooLarge: an exec websocket message beyond the limit
// closes the session and ends its command.
func TestExecFrameTooLarge(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket())
	}}
	ws, resp, err := d.Dial("ws://vessel/1.0/instances/c1/exec", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	defer ws.Close()
	if err := ws.WriteJSON(api.ExecPost{Command: []string{"sleep", "3131"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the exec'd command running", func() bool {
		return strings.Contains(h.OK("exec", "c1", "--", "ps"), "sleep 3131")
	})
	frame := append([]byte{api.StreamStdin}, bytes.Repeat([]byte("x"), 4<<20)...)
	_ = ws.WriteMessage(websocket.BinaryMessage, frame) // the server may close while it is written
	_ = ws.SetReadDeadline(time.Now().Add(bound))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseMessageTooBig, websocket.CloseNormalClosure) {
				t.Logf("session ended: %v", err)
			}
			break
		}
	}
	eventually(t, "the session's command ending", func() bool {
		return !strings.Contains(h.OK("exec", "c1", "--", "ps"), "sleep 3131")
	})
	h.OK("delete", "--force", "c1")
}

// freePort returns a loopback TCP port free now.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSlowLorisAndFlood: on the HTTPS address, which anyone may reach, a
// client trickling a request body and a flood of connections beyond the
// cap are closed by the server, while normal requests are served.
func TestSlowLorisAndFlood(t *testing.T) {
	addr := freePort(t)
	const maxConns = 8
	h := newHostWith(t, "--listen", addr, "--max-connections", strconv.Itoa(maxConns), "--http-read-timeout", "5s")
	tlsCfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // an untrusted client, as an attacker is
	normal := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}, Timeout: bound}
	getPublic := func() error {
		resp, err := normal.Get("https://" + addr + "/1.0")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	// Slow loris: headers, then the body a byte a second.
	slow, err := tls.Dial("tcp", addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "POST /1.0/certificates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range tick.C {
			if _, err := slow.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	if err := getPublic(); err != nil {
		t.Errorf("a normal request while the slow one trickles: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(bound):
		t.Fatal("the server kept the slow connection open")
	}

	// A flood: twice the cap of connections that never speak.
	var flood []net.Conn
	for range 2 * maxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		flood = append(flood, c)
	}
	// The local socket has its own cap: the administrator is served at once.
	h.OK("list")
	// A normal HTTPS client gets through once the server drops the idle
	// flood (each connection has ReadHeaderTimeout for its handshake).
	if err := getPublic(); err != nil {
		t.Errorf("a normal request during the flood: %v", err)
	}
	for i, c := range flood {
		_ = c.SetReadDeadline(time.Now().Add(bound))
		if _, err := bufio.NewReader(c).ReadByte(); err == nil {
			t.Errorf("flood connection %d: the server sent data instead of closing", i)
		} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Errorf("flood connection %d still open after %v", i, bound)
		}
	}
}

// TestDecompressionBomb: an image that expands beyond --image-max-size is
// refused with a clear error and leaves no file in the image store.
func TestDecompressionBomb(t *testing.T) {
	h := newHostWith(t, "--image-max-size", "16")
	before := h.OK("image", "list", "--format", "csv")
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	zeros := make([]byte, 128<<20)
	for _, m := range []struct {
		name string
		data []byte
	}{{"sbin/init", []byte("#!/bin/sh\n")}, {"zeros", zeros}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o755, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(m.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	bomb := filepath.Join(t.TempDir(), "bomb.tar.gz")
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bomb, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	h.Fails("larger than 16 MiB once decompressed", "image", "import", bomb, "--alias", "bomb")
	if after := h.OK("image", "list", "--format", "csv"); after != before {
		t.Errorf("the refused import changed the image list:\n%s", after)
	}
	entries, err := os.ReadDir(filepath.Join(h.Root(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("left in the image store: %s", e.Name())
		}
	}
}
