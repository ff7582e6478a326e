package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/qemu"
)

// A VM's guest RAM is a file, RUN/vm-ram/NAME.ram, that its QEMU maps
// shared (qemu.Config.RAMFile), so that a stateful restore, which kills
// the VM's QEMU and starts a new one, hands the new QEMU RAM whose pages
// exist already: the load then only overwrites them, where fresh
// anonymous RAM makes the kernel find every page first (on a host that
// hands free memory back to its own hypervisor, slower than the disk's
// read: most of an 8 GiB load). Before the new QEMU starts, the ranges the
// snapshot's state file does not hold are punched out of the file
// (qemu.PrepareRAMFile): the guest sees the snapshot's memory, zero where
// the snapshot had zero pages, never the killed QEMU's.
//
// The file lives as long as the VM runs: every stop, exit, delete or move
// away removes it (releaseVMRun), except the stop of a stateful restore,
// which also keeps the VM's cgroup: the file's pages stay charged to the
// memory cgroup of the QEMU that first touched them, and the new QEMU
// joins the same one. A daemon start removes the files of VMs that no
// longer run (a daemon that died inside a restore). RUN/vm-ram is a tmpfs
// of vessel's own without a size limit (the files are guest RAM, bounded
// by each VM's size and its cgroup; a sized tmpfs such as /dev/shm would
// kill QEMU with SIGBUS at its limit), mounted at the daemon's start and
// unmounted with the host's release. With VMAnonymousRAM, VMs run on
// anonymous RAM as QEMU's default (a restore loads into fresh RAM).

// vmRAMTmpfsSource names the RAM files' tmpfs in mountinfo.
const vmRAMTmpfsSource = "vessel-vm-ram"

// vmRAMRoot is where VMs' RAM files are.
func (c *Config) vmRAMRoot() string { return filepath.Join(c.RunDir, "vm-ram") }

// vmRAMFile is a VM's RAM file; "" when VMs run on anonymous RAM.
func (c *Config) vmRAMFile(name string) string {
	if c.VMAnonymousRAM {
		return ""
	}
	return filepath.Join(c.vmRAMRoot(), name+".ram")
}

// mountVMRAMTmpfs mounts the RAM files' tmpfs (size=0: no limit of its
// own), or finds it from an earlier start, with huge pages as
// vmRAMHugeOption says.
func (c *Config) mountVMRAMTmpfs() error {
	if c.VMAnonymousRAM {
		return nil
	}
	huge := c.vmRAMHugeOption()
	if err := mountOwnTmpfs(c.vmRAMRoot(), vmRAMTmpfsSource, "size=0,"+huge+",", true); err != nil {
		return err
	}
	// A mount an earlier start left keeps its options until remounted
	// (files that exist keep the pages they have).
	if err := unix.Mount("", c.vmRAMRoot(), "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, huge); err != nil {
		return fmt.Errorf("remount %s with %s: %w", c.vmRAMRoot(), huge, err)
	}
	return nil
}

// vmRAMHugeOption is the RAM tmpfs's huge= option. huge=advise gives a
// VM's RAM file 2 MiB pages where the QEMU faulting them allows it: QEMU
// madvise(MADV_HUGEPAGE)s its guest RAM, so a booted VM's pages are huge,
// while a restore's QEMU, started with THP disabled (Config.NoTHP), faults
// small ones. What it buys is the restore's populate of kept RAM: mapping
// a kept 2 MiB page is one fault for its 512 entries (the kernel maps a
// shmem folio whole), where small pages are one fault each; a scratch
// probe mapping a kept 2 GiB file (MADV_POPULATE_WRITE, THP disabled)
// took 0.13-0.16 s against 0.63-0.82 s. A KVM guest gets the TLB reach of
// huge pages too, until its first restore.
func (c *Config) vmRAMHugeOption() string {
	if c.VMRAMSmallPages || !hostHasTHP() {
		return "huge=never"
	}
	return "huge=advise"
}

// hostHasTHP says whether the kernel has transparent huge pages: one
// without refuses a tmpfs huge= option other than never.
func hostHasTHP() bool {
	_, err := os.Stat("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
	return err == nil
}

// unmountVMRAMTmpfs undoes mountVMRAMTmpfs (with no VM running).
func (c *Config) unmountVMRAMTmpfs() error {
	return unmountOwnTmpfs(c.vmRAMRoot(), vmRAMTmpfsSource)
}

// removeVMRAM removes a VM's RAM file (its pages go with the last QEMU
// that maps it).
func (d *Daemon) removeVMRAM(name string) error {
	f := d.cfg.vmRAMFile(name)
	if f == "" {
		return nil
	}
	if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// hasVMRAM says whether a VM's RAM file exists (before a restore's
// launch: prepareVMRAM kept it).
func (d *Daemon) hasVMRAM(name string) bool {
	f := d.cfg.vmRAMFile(name)
	if f == "" {
		return false
	}
	_, err := os.Stat(f)
	return err == nil
}

// prepareVMRAM readies the RAM file a stateful restore kept for the load of
// statePath (qemu.PrepareRAMFile); a file it cannot use is removed and the
// VM loads into fresh RAM (a warning, not an error).
func (d *Daemon) prepareVMRAM(name, statePath string) qemu.RAMFileStats {
	f := d.cfg.vmRAMFile(name)
	if f == "" {
		return qemu.RAMFileStats{}
	}
	// vessel's VMs are q35 machines (vmQEMUConfig).
	st, err := qemu.PrepareRAMFile(f, statePath, qemu.Config{}.RAMBlockName())
	if err != nil {
		d.log.Warn("restore into fresh RAM", "name", name, "err", err)
	}
	return st
}

// dropUnusedVMRAM removes the RAM files of VMs without a running QEMU
// (after reconcile: a daemon that died between a restore's stop and its
// start, or a VM deleted meanwhile).
func (d *Daemon) dropUnusedVMRAM() {
	entries, err := os.ReadDir(d.cfg.vmRAMRoot())
	if err != nil {
		return
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".ram")
		if inst := d.insts.get(name); ok && inst != nil && inst.live() != nil && isVM(inst) {
			continue
		}
		d.log.Info("removing the RAM file of a VM that does not run", "file", e.Name())
		d.undo("remove vm ram file", name, os.Remove(filepath.Join(d.cfg.vmRAMRoot(), e.Name())))
	}
}
