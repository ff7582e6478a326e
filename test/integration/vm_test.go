package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/qemu"
)

// vmBoot bounds a VM's boot or shutdown under TCG (seconds here; a loaded
// machine takes longer). Only a bound, never an assertion.
const vmBoot = 3 * time.Minute

// console returns a VM's console log.
func (h *host) console(name string) string { return h.OK("console", "--show-log", name) }

// waitConsole waits until the console log holds want n times.
func (h *host) waitConsole(name, want string, n int) {
	h.t.Helper()
	deadline := time.Now().Add(vmBoot)
	for {
		c := h.console(name)
		if strings.Count(c, want) >= n {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %q x%d on %s's console after %s; it says:\n%s", want, n, name, vmBoot, c)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// qmpStatus asks the VM's QEMU for its run state.
func (h *host) qmpStatus(name string) qemu.Status {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mon, err := qemu.Connect(ctx, qemu.Config{RunDir: filepath.Join(h.RunDir(), "vm", name)}.QMPSocket())
	if err != nil {
		h.t.Fatal(err)
	}
	defer mon.Close()
	s, err := mon.QueryStatus(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// TestVMLifecycle launches the built-in busybox image as a VM (under
// whatever accelerator the host has: TCG here) and drives it through the
// CLI: it boots on its own disk with its address (busybox's rcS prints
// it), QEMU reports running, it answers ping on the bridge, stops by the
// ACPI power button (the guest's init shuts down: rcK prints), starts and
// restarts, and a delete leaves no QEMU, tap or run directory.
func TestVMLifecycle(t *testing.T) {
	h := newHost(t) // its VMs boot vessel-agent, built beside vesseld
	h.OK("launch", "busybox", "vm1", "--vm", "-c", "limits.cpu=1", "-c", "limits.memory=256MiB")
	i := h.instances()["vm1"]
	if i.Type != api.InstanceVM || i.Status != api.StatusRunning || i.PID == 0 || i.IPv4 == "" {
		t.Fatalf("after launch: %+v", i)
	}
	// QEMU runs in the VM's own cgroups, under a finite memory limit (the
	// guest's RAM and QEMU's overhead), from its launch on.
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if got, err := cgroups.ProcessCgroup(i.PID, ctl); err != nil || got != h.CgroupParent()+"/vm1" {
			t.Errorf("qemu %d in %s cgroup %q (%v), want %s/vm1", i.PID, ctl, got, err, h.CgroupParent())
		}
	}
	memFile := "memory.limit_in_bytes"
	if v2 {
		memFile = "memory.max"
	}
	if lim, err := strconv.ParseInt(h.CgroupFile("vm1", "memory", memFile), 10, 64); err != nil || lim < 256<<20 || lim > 2<<30 {
		t.Errorf("vm1's memory limit %d (%v), want 256 MiB and QEMU's overhead", lim, err)
	}
	if table := h.OK("list"); !strings.Contains(table, "VIRTUAL-MACHINE") {
		t.Errorf("list shows no VM type:\n%s", table)
	}
	if info := h.OK("info"); !strings.Contains(info, "VM accelerator") {
		t.Errorf("info shows no accelerator:\n%s", info)
	}
	if s := h.qmpStatus("vm1"); !s.Running || s.Status != "running" {
		t.Errorf("qemu status %+v", s)
	}
	booted := fmt.Sprintf("vessel: vm1 booted, eth0: %s/", i.IPv4)
	h.waitConsole("vm1", booted, 1)
	eventuallyWithin(t, vmBoot, "the guest answering ping", func() bool {
		return exec.Command("busybox", "ping", "-c", "1", "-W", "1", i.IPv4).Run() == nil // busybox-static is a setup package
	})

	// Stop: the ACPI power button; the guest's init shuts down itself
	// (within the generous timeout, else vessel would kill it and rcK
	// would not print).
	h.OK("stop", "vm1", "--timeout", "180")
	if got := h.instances()["vm1"]; got.Status != api.StatusStopped {
		t.Fatalf("after stop: %+v", got)
	}
	if c := h.console("vm1"); !strings.Contains(c, "vessel-agent: power button") || !strings.Contains(c, "vessel: vm1 shutting down") {
		t.Errorf("the guest did not shut down by ACPI; console:\n%s", c)
	}
	if alive(i.PID) {
		t.Errorf("qemu %d still runs after stop", i.PID)
	}

	h.OK("start", "vm1")
	h.waitConsole("vm1", booted, 2)
	h.OK("restart", "vm1", "--timeout", "180")
	h.waitConsole("vm1", booted, 3)
	i = h.instances()["vm1"]
	if i.Status != api.StatusRunning || i.PID == 0 {
		t.Fatalf("after restart: %+v", i)
	}

	h.OK("delete", "vm1", "--force")
	if _, ok := h.instances()["vm1"]; ok {
		t.Fatal("vm1 still listed after delete")
	}
	if alive(i.PID) {
		t.Errorf("qemu %d still runs after delete", i.PID)
	}
	tap := network.HostVethName(h.Bridge(), "vm1")
	if exec.Command("ip", "link", "show", tap).Run() == nil {
		t.Errorf("tap %s left", tap)
	}
	if _, err := os.Stat(filepath.Join(h.RunDir(), "vm", "vm1")); !os.IsNotExist(err) {
		t.Errorf("run directory left: %v", err)
	}
}

// alive says a process exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}
