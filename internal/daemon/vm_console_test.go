package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/state"
)

// TestVMConsoleAttach: the console joins the client's streams to the VM's
// serial socket both ways, one client at a time; the VM's stop ends it; a
// container and a stopped VM have none to attach to.
func TestVMConsoleAttach(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "vm1", state.StateStopped, vmRecord)
	td.addInstance(t, "c1", state.StateStopped)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := td.Console(ctx, "vm1", api.ExecIO{Stdout: io.Discard}); !errors.Is(err, ErrConflict) {
		t.Fatalf("console of a stopped VM: %v", err)
	}
	if err := td.Console(ctx, "c1", api.ExecIO{Stdout: io.Discard}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("console of a container: %v", err)
	}
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatal(err)
	}
	// The guest's side of the serial port: it echoes lines upper-cased.
	l, err := net.Listen("unix", qemu.Config{RunDir: td.cfg.vmRunDir("vm1")}.ConsoleSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			_, _ = io.WriteString(c, "GUEST "+sc.Text()+"\n")
		}
	}()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	attached := make(chan error, 1)
	go func() {
		attached <- td.Console(ctx, "vm1", api.ExecIO{Stdin: inR, Stdout: outW})
		outW.Close()
	}()
	out := bufio.NewReader(outR)
	if _, err := io.WriteString(inW, "hello\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "GUEST hello\n" {
		t.Fatalf("console answer %q, %v", line, err)
	}
	if err := td.Console(ctx, "vm1", api.ExecIO{Stdout: io.Discard}); !errors.Is(err, ErrConflict) {
		t.Fatalf("second attach: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err := changeState(t, td, "vm1", api.InstanceStatePut{Action: api.ActionStop}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-attached:
		if err != nil {
			t.Fatalf("console at the VM's stop: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the console outlived the VM")
	}
}
