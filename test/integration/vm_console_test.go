package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestVMConsoleRebootPoweroff drives one busybox VM (TCG here) through
// what a user does with a VM's serial console and its own power (and
// `vessel info` shows its agent ready):
//
//   - `vessel console vm1` attaches to ttyS0 both ways: the built-in
//     image's inittab runs no getty (it is made for containers), so the
//     agent runs the image's getty there; with a root password set
//     through exec, the test logs in on the console, types a command
//     line and reads the answer; a second attach is refused meanwhile;
//     ctrl+a q detaches; the console log recorded it all (--show-log);
//   - `reboot` in the guest resets the machine: the same QEMU boots the
//     guest again, the VM stays running and exec reaches the new boot's
//     agent;
//   - `poweroff` in the guest stops the VM and releases what it held;
//   - a guest kernel panic (sysrq c) stops it too (pvpanic), instead of
//     rebooting it.
func TestVMConsoleRebootPoweroff(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "vm1", "--vm", "-c", "limits.memory=256MiB")
	booted := "vessel: vm1 booted, eth0: "
	h.waitConsole("vm1", booted, 1)
	h.OK("exec", "vm1", "--", "true") // the agent answers
	if info := h.OK("info", "vm1"); !strings.Contains(info, "ready since") {
		t.Errorf("info does not show the agent ready:\n%s", info)
	}

	// The image locks root's password: set one to log in with.
	h.OK("exec", "vm1", "--", "sh", "-c", `h=$(mkpasswd -m sha512 console-pw) && sed -i "s|^root:[^:]*:|root:$h:|" /etc/shadow`)
	ctx, cancel := context.WithTimeout(context.Background(), vmBoot)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.Bin(), "vessel"), "console", "vm1")
	cmd.Env = h.Env()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	eventuallyWithin(t, vmBoot, "the console attached", func() bool {
		return strings.Contains(stderr.String(), "ctrl>+a q")
	})
	// The agent's getty on ttyS0 prompts again at each empty line.
	polls := 0
	eventuallyWithin(t, vmBoot, "a login prompt on the console", func() bool {
		if polls++; polls%20 == 1 {
			_, _ = io.WriteString(stdin, "\n")
		}
		return strings.Contains(stdout.String(), "vm1 login:")
	})
	for _, step := range [][2]string{{"root\n", "Password:"}, {"console-pw\n", "#"}} {
		if _, err := io.WriteString(stdin, step[0]); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, vmBoot, "the console's "+step[1], func() bool {
			return strings.Contains(stdout.String(), step[1])
		})
	}
	// The answer differs from the echoed command line.
	if _, err := io.WriteString(stdin, "echo console-$((6*7))-ok\n"); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, vmBoot, "the guest's answer on the console", func() bool {
		return strings.Contains(stdout.String(), "console-42-ok")
	})
	h.Fails("attached already", "console", "vm1")
	if _, err := io.WriteString(stdin, "\x01q"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("console after ctrl+a q: %v\nstderr: %s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("ctrl+a q did not detach")
	}
	if log := h.console("vm1"); !strings.Contains(log, "console-42-ok") {
		t.Errorf("the console log did not record the session:\n%s", log)
	}

	// reboot: the same QEMU, running, a new boot with its agent.
	pid := h.instances()["vm1"].PID
	h.Vessel("exec", "vm1", "--", "reboot") // the agent may die before it answers
	h.waitConsole("vm1", booted, 2)
	if i := h.instances()["vm1"]; i.Status != api.StatusRunning || i.PID != pid {
		t.Fatalf("after the guest's reboot: %+v (qemu was %d)", i, pid)
	}
	if out := h.OK("exec", "vm1", "--", "sh", "-c", "echo up $(cut -d. -f1 /proc/uptime)"); !strings.HasPrefix(out, "up ") {
		t.Fatalf("exec after the reboot: %q", out)
	}

	// poweroff: stopped, and nothing of the run left.
	h.Vessel("exec", "vm1", "--", "poweroff")
	eventuallyWithin(t, vmBoot, "the VM stopped after the guest's poweroff", func() bool {
		return h.instances()["vm1"].Status == api.StatusStopped
	})
	h.checkVMReleased("vm1", pid)

	// A panic the guest reports (pvpanic) ends QEMU rather than a reboot.
	h.OK("start", "vm1")
	h.waitConsole("vm1", booted, 3)
	pid = h.instances()["vm1"].PID
	h.Vessel("exec", "vm1", "--", "sh", "-c", "echo c >/proc/sysrq-trigger")
	eventuallyWithin(t, vmBoot, "the VM stopped after the guest's panic", func() bool {
		return h.instances()["vm1"].Status == api.StatusStopped
	})
	if log := h.console("vm1"); !strings.Contains(log, "Kernel panic") || strings.Count(log, booted) != 3 {
		t.Errorf("the panic: want it on the console and no boot after it:\n%s", log)
	}
	h.checkVMReleased("vm1", pid)
	h.OK("delete", "vm1")
}

// checkVMReleased: the VM's QEMU, tap and run directory are gone.
func (h *host) checkVMReleased(name string, pid int) {
	h.t.Helper()
	eventuallyWithin(h.t, 30*time.Second, "qemu's end", func() bool { return !alive(pid) })
	if err := exec.Command("ip", "link", "show", network.HostVethName(h.Bridge(), name)).Run(); err == nil {
		h.t.Errorf("tap of %s left", name)
	}
	if _, err := os.Stat(filepath.Join(h.RunDir(), "vm", name)); !errors.Is(err, os.ErrNotExist) {
		h.t.Errorf("run directory of %s left: %v", name, err)
	}
}
