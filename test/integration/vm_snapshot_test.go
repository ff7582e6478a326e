package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/qemu"
)

// guestFile reads a file of a VM's disk image from the host (debugfs,
// e2fsprogs), "" if it is not there.
func guestFile(t *testing.T, image, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, image).Output()
	if err != nil {
		t.Fatalf("debugfs %s: %v", image, err)
	}
	return string(out)
}

// mappingStart is the start address of process pid's mapping of file
// (/proc/PID/maps).
func mappingStart(pid int, file string) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != file {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		return strconv.ParseUint(lo, 16, 64)
	}
	return 0, fmt.Errorf("pid %d does not map %s", pid, file)
}

// TestVMSnapshotStateful drives a VM's snapshots through the CLI (busybox
// image, 256 MiB, TCG here). A stateful snapshot saves the guest's memory
// while it runs: the VM keeps its QEMU and goes on writing to its disk;
// the snapshot's disk holds what the guest had synced before it, not
// after. After the guest has changed its RAM (a tmpfs file, a process
// killed) and its disk, a stateful restore brings back both as they were:
// the tmpfs file, the process with its pid, the disk without the later
// file. A fault injected after the save (VM held stopped, disk taken)
// leaves nothing and the VM running; so does the daemon's death there,
// once it is restarted. A disk-only snapshot and restore
// reboot the VM on the old disk. Deleting the snapshot removes the state
// file.
func TestVMSnapshotStateful(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "vm1", "--vm", "-c", "limits.memory=256MiB")
	// The first exec waits for the agent.
	// /mnt/ram/zero is 16 MiB of guest pages that are zero at the
	// snapshot: the state file does not hold them (mapped-ram's zero
	// pages), so the restore must zero what the guest writes there later.
	h.OK("exec", "vm1", "--", "sh", "-c", "echo before > /root/before; mkdir -p /mnt/ram; mount -t tmpfs ram /mnt/ram; echo ram1 > /mnt/ram/x; dd if=/dev/zero of=/mnt/ram/zero bs=1M count=16 2>/dev/null; sync")
	pid := strings.TrimSpace(h.OK("exec", "vm1", "--", "sh", "-c", "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $!"))
	qemuPid := h.instances()["vm1"].PID
	if off, err := qemu.THPDisabled(qemuPid); err != nil || off {
		t.Errorf("booted qemu %d: transparent huge pages disabled %v (%v), want false", qemuPid, off, err)
	}
	if start, err := mappingStart(qemuPid, filepath.Join(h.RunDir(), "vm-ram", "vm1.ram")); err != nil || start%(2<<20) != 0 {
		t.Errorf("booted qemu maps its RAM file at %#x (%v), want a 2 MiB boundary", start, err)
	}

	h.OK("snapshot", "create", "vm1", "s1", "--stateful")
	s := h.snapshots("vm1")["s1"]
	if !s.Stateful || s.MemoryBytes == 0 || s.DiskBytes == 0 || s.FrozenMs <= 0 {
		t.Fatalf("snapshot record %+v", s)
	}
	t.Logf("stateful snapshot: frozen %.1f ms, state %d MiB", s.FrozenMs, s.MemoryBytes>>20)
	state := filepath.Join(h.PoolPath(), "checkpoints", "vm1", "s1", "vm.state")
	if _, err := os.Stat(state); err != nil {
		t.Fatal(err)
	}
	if i := h.instances()["vm1"]; i.Status != api.StatusRunning || i.PID != qemuPid {
		t.Fatalf("after the snapshot: %+v, want qemu %d running", i, qemuPid)
	}
	// The guest runs on and its disk takes writes (QEMU re-activated it).
	h.OK("exec", "vm1", "--", "sh", "-c", "echo after > /root/after; sync")
	if got := h.OK("exec", "vm1", "--", "cat", "/root/after", "/mnt/ram/x"); got != "after\nram1\n" {
		t.Errorf("guest after the snapshot: %q", got)
	}
	snapDisk := filepath.Join(h.PoolPath(), "snapshots", "vm1", "s1", "disk.img")
	if got := guestFile(t, snapDisk, "/root/before"); got != "before\n" {
		t.Errorf("snapshot disk's /root/before = %q", got)
	}
	if got := guestFile(t, snapDisk, "/root/after"); got != "" {
		t.Errorf("snapshot disk has /root/after: %q", got)
	}

	// A fault after the save: the VM was held stopped with its disk
	// taken; it runs on, nothing is left.
	h.RestartWith("--fault", "snapshot.vm.saved=fail")
	h.Fails("snapshot.vm.saved", "snapshot", "create", "vm1", "bad", "--stateful")
	if _, ok := h.snapshots("vm1")["bad"]; ok {
		t.Error("failed snapshot listed")
	}
	h.assertNoSnapshotTraces("vm1", "bad")
	if i := h.instances()["vm1"]; i.Status != api.StatusRunning || i.PID != qemuPid {
		t.Errorf("after the failed snapshot: %+v", i)
	}
	// The daemon dies there: the next one lets the VM run and drops the
	// snapshot's volumes.
	h.RestartWith("--fault", "snapshot.vm.saved=crash")
	if r := h.Vessel("snapshot", "create", "vm1", "crashed", "--stateful"); r.Code == 0 {
		t.Fatal("the snapshot succeeded although the daemon was killed")
	}
	h.RestartWith()
	if s := h.qmpStatus("vm1"); s.Status != "running" {
		t.Errorf("after the crash and restart qemu is %q", s.Status)
	}
	if _, ok := h.snapshots("vm1")["crashed"]; ok {
		t.Error("the crashed snapshot is listed")
	}
	h.assertNoSnapshotTraces("vm1", "crashed")
	h.OK("exec", "vm1", "--", "sh", "-c", "echo new > /root/new; echo ram2 > /mnt/ram/x; dd if=/dev/urandom of=/mnt/ram/zero bs=1M count=16 conv=notrunc 2>/dev/null; kill "+pid+"; sync")
	ramFile := filepath.Join(h.RunDir(), "vm-ram", "vm1.ram")
	if _, err := os.Stat(ramFile); err != nil {
		t.Errorf("the running VM's RAM file: %v", err)
	}

	h.Fails("--force", "snapshot", "restore", "vm1", "s1", "--stateful")
	h.OK("snapshot", "restore", "vm1", "s1", "--stateful", "--force")
	i := h.instances()["vm1"]
	if i.Status != api.StatusRunning || i.PID == qemuPid {
		t.Fatalf("after restore: %+v (qemu was %d)", i, qemuPid)
	}
	// The restore kept the RAM file: its QEMU keeps transparent huge
	// pages (it faults in only the punched pages; into fresh RAM it would
	// start without them), and maps the file at a 2 MiB boundary, where
	// the file's huge pages can be mapped whole.
	if off, err := qemu.THPDisabled(i.PID); err != nil || off {
		t.Errorf("restored qemu %d: transparent huge pages disabled %v (%v), want false", i.PID, off, err)
	}
	if start, err := mappingStart(i.PID, ramFile); err != nil || start%(2<<20) != 0 {
		t.Errorf("restored qemu maps %s at %#x (%v), want a 2 MiB boundary", ramFile, start, err)
	}
	if got := h.OK("exec", "vm1", "--", "cat", "/mnt/ram/x", "/root/before"); got != "ram1\nbefore\n" {
		t.Errorf("after restore: %q, want the snapshot's tmpfs file and disk", got)
	}
	// The new QEMU mapped the old one's RAM file, and the pages the state
	// did not hold read zero, not what the guest wrote after the snapshot.
	if got := strings.TrimSpace(h.OK("exec", "vm1", "--", "sh", "-c", "tr -d '\\000' < /mnt/ram/zero | wc -c")); got != "0" {
		t.Errorf("after restore /mnt/ram/zero holds %s non-zero bytes: the killed QEMU's pages", got)
	}
	if r := h.Vessel("exec", "vm1", "--", "kill", "-0", pid); r.Code != 0 {
		t.Errorf("the guest's sleep %s is not back: %s", pid, r)
	}
	for _, f := range []string{"/root/new", "/root/after"} {
		if r := h.Vessel("exec", "vm1", "--", "test", "-e", f); r.Code == 0 {
			t.Errorf("%s, written after the snapshot, survived the restore", f)
		}
	}
	// It writes to its restored disk.
	h.OK("exec", "vm1", "--", "sh", "-c", "echo again > /root/again; sync")

	// Disk only: the vCPUs stop for the copy alone; a restore reboots.
	h.OK("snapshot", "create", "vm1", "d1")
	if d := h.snapshots("vm1")["d1"]; d.Stateful || d.MemoryBytes != 0 || d.FrozenMs <= 0 {
		t.Errorf("disk-only snapshot %+v", d)
	}
	h.OK("exec", "vm1", "--", "sh", "-c", "echo later > /root/later; sync")
	h.OK("snapshot", "restore", "vm1", "d1", "--force")
	if got := h.OK("exec", "vm1", "--", "sh", "-c", "cat /root/again; test -e /root/later || echo gone; test -e /mnt/ram/x || echo ram-gone"); got != "again\ngone\nram-gone\n" {
		t.Errorf("after the disk-only restore: %q", got)
	}

	h.OK("snapshot", "delete", "vm1", "s1")
	h.assertNoSnapshotTraces("vm1", "s1")
	h.OK("delete", "vm1", "--force")
	h.assertNoSnapshotTraces("vm1", "d1")
	if _, err := os.Stat(ramFile); !os.IsNotExist(err) {
		t.Errorf("the deleted VM's RAM file: %v", err)
	}
}
