package daemon

import (
	"context"
	"io"
	"net"
	"sync"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu"
)

// vmConsoles marks the VMs whose serial console is attached: QEMU's
// console chardev serves one client at a time (a second would wait
// unanswered), so a second attach is refused. The zero value is ready.
type vmConsoles struct {
	mu       sync.Mutex
	attached map[string]bool
}

func (c *vmConsoles) take(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attached[name] {
		return false
	}
	if c.attached == nil {
		c.attached = map[string]bool{}
	}
	c.attached[name] = true
	return true
}

func (c *vmConsoles) release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attached, name)
}

// Console attaches to a running VM's serial console (ttyS0, the kernel's
// console): what the guest prints from now on goes to stdio.Stdout,
// stdio.Stdin goes to the guest. QEMU's log file of the console records
// all of it meanwhile (vessel console --show-log). It returns when ctx
// ends (the client detached) or the VM stops; the end of stdin alone does
// not detach (output may still come).
func (d *Daemon) Console(ctx context.Context, name string, stdio api.ExecIO) error {
	inst, err := d.instance(name)
	if err != nil {
		return err
	}
	if !isVM(inst) {
		return errorf(ErrInvalid, "%q is a container: it has no serial console to attach to (its console log: vessel console --show-log)", name)
	}
	if err := actExec.allowed(inst, false); err != nil {
		return err
	}
	run := inst.live()
	if run == nil {
		return errorf(ErrConflict, "instance %q is not running", name)
	}
	if !d.consoles.take(name) {
		return errorf(ErrConflict, "the console of %q is attached already (one client at a time)", name)
	}
	defer d.consoles.release(name)
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", qemu.Config{RunDir: d.cfg.vmRunDir(name)}.ConsoleSocket())
	if err != nil {
		return errorf(ErrConflict, "the console of %q: %v", name, err)
	}
	defer conn.Close()
	out := make(chan struct{})
	go func() {
		defer close(out)
		_, _ = io.Copy(stdio.Stdout, conn) // ends when QEMU ends or conn is closed
	}()
	if stdio.Stdin != nil {
		go func() { _, _ = io.Copy(conn, stdio.Stdin) }()
	}
	select {
	case <-ctx.Done():
	case <-out:
	case <-run.exited:
	}
	conn.Close()
	<-out
	return nil
}
