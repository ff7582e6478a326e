package daemon

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// chardevAgent serves an agent on a unix socket one connection at a time,
// as QEMU's virtio-serial chardev and the guest's agent do.
// Commands and files are the host's (no chroot).
func chardevAgent(t *testing.T) (string, *atomic.Int32) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	srv := &agent.Server{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = srv.ServeConn(c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
	})
	return sock, &conns
}

func TestVMAgentsExecAndPush(t *testing.T) {
	dir := t.TempDir()
	sock, conns := chardevAgent(t)
	var a vmAgents
	defer a.drop("vm1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	code, err := a.Exec(ctx, "vm1", sock, runtime.ExecOptions{Args: []string{"sh", "-c", "cat; exit 4"}, Stdin: strings.NewReader("in\n"), Stdout: &out})
	if err != nil || code != 4 || out.String() != "in\n" {
		t.Fatalf("exec: %d %v %q", code, err, out.String())
	}
	code, err = a.Exec(ctx, "vm1", sock, runtime.ExecOptions{Args: []string{"sh", "-c", "kill -KILL $$"}})
	if err != nil || code != 137 {
		t.Fatalf("killed exec: %d %v", code, err)
	}
	err = a.PushFile(ctx, "vm1", sock, filepath.Join(dir, "f"), strings.NewReader("data"), agent.FileOptions{Mode: 0o600, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "data" {
		t.Fatalf("pushed %q %v", b, err)
	}
	if err := a.PushFile(ctx, "vm1", sock, filepath.Join(dir, "no/f"), strings.NewReader(""), agent.FileOptions{}); err == nil {
		t.Fatal("push into a missing directory succeeded")
	}
	// The requests shared one session.
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections", n)
	}
	// A dropped session (vesseld restarts, the VM restarts) is dialed
	// again.
	a.drop("vm1")
	if code, err := a.Exec(ctx, "vm1", sock, runtime.ExecOptions{Args: []string{"true"}}); err != nil || code != 0 {
		t.Fatalf("exec after drop: %d %v", code, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections after the drop", n)
	}
}

// TestVMExecAndPushGoThroughTheAgent: a running VM's exec and file push
// reach the agent on the VM's chardev socket; its stop ends the session.
func TestVMExecAndPushGoThroughTheAgent(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", td.vmAgentSocket("vm1"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = (&agent.Server{}).ServeConn(c)
		}
	}()
	defer func() {
		_ = l.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	code, err := td.Exec(ctx, "vm1", api.ExecPost{Command: []string{"sh", "-c", "echo $FOO; exit 3"}, Env: map[string]string{"FOO": "bar"}, Cwd: "/"},
		api.ExecIO{Stdout: &out})
	if err != nil || code != 3 || out.String() != "bar\n" {
		t.Fatalf("exec in the VM: %d %v %q", code, err, out.String())
	}
	dst := filepath.Join(t.TempDir(), "f")
	if err := td.PushFile(ctx, "vm1", dst, strings.NewReader("pushed"), api.FilePush{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "pushed" {
		t.Fatalf("pushed %q %v", b, err)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop}); err != nil {
		t.Fatal(err)
	}
	td.agents.mu.Lock()
	left := len(td.agents.vms)
	td.agents.mu.Unlock()
	if left != 0 {
		t.Fatal("the stopped VM's agent session is still held")
	}
	if _, err := td.Exec(ctx, "vm1", api.ExecPost{Command: []string{"true"}}, api.ExecIO{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("exec in a stopped VM: %v", err)
	}
}
