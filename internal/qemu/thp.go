package qemu

// Transparent huge pages and a load.
//
// QEMU asks for transparent huge pages on all guest RAM
// (madvise(MADV_HUGEPAGE) on every RAM block, unconditionally), and a
// state load touches every page of a fresh QEMU's RAM for the first time:
// the multifd channels' O_DIRECT reads fault the guest's RAM in as they
// land. How fast a host hands out huge pages on first touch is the host's
// business: on this development machine (a VM whose hypervisor takes back
// free memory in 8 MiB chunks: virtio-balloon free page reporting,
// page_reporting_order=11) a 2 MiB page costs ~5x what 512 small ones do,
// and bench/vmsnapshot measured loads of 0.16-0.31x the disk's read rate
// with huge pages against 0.8-1.2x without (2 GiB guest, same run).
// Config.NoTHP starts QEMU with transparent huge pages off for its whole
// life (PR_SET_THP_DISABLE survives execve; nothing else can turn them off
// for QEMU's guest RAM from outside, and QEMU has no option for it):
// vessel sets it for the QEMU a stateful restore starts, not for a boot
// (where the guest touches its memory over its life, and huge pages serve
// a KVM guest's TLB).
//
// Go's os/exec has no hook between fork and exec, so the prctl is made by
// a vessel binary re-executed as a launcher: Start runs
// `LAUNCHER NoTHPArg qemu-system-x86_64 ARGS...`, and the launcher's main
// hands such an invocation to ExecNoTHP before anything else.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NoTHPArg is the first argument that makes a vessel binary a QEMU
// launcher with transparent huge pages off (see ExecNoTHP).
const NoTHPArg = "__qemu-no-thp"

// IsNoTHPLaunch tells whether args (os.Args) ask this binary to be the
// launcher.
func IsNoTHPLaunch(args []string) bool {
	return len(args) > 2 && args[1] == NoTHPArg
}

// ExecNoTHP turns transparent huge pages off for this process and what it
// executes (prctl PR_SET_THP_DISABLE) and replaces it with args[2:]
// (os.Args of an invocation IsNoTHPLaunch accepted). It returns only on
// failure.
func ExecNoTHP(args []string) error {
	if !IsNoTHPLaunch(args) {
		return fmt.Errorf("%s: no command", NoTHPArg)
	}
	argv := args[2:]
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("%s: %w", NoTHPArg, err)
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%s: PR_SET_THP_DISABLE: %w", NoTHPArg, err)
	}
	return fmt.Errorf("%s: exec %s: %w", NoTHPArg, path, syscall.Exec(path, argv, os.Environ()))
}

// command returns the program and arguments that start QEMU with args:
// QEMU itself, or through the launcher when cfg.NoTHP.
func (c Config) command(args []string) (string, []string, error) {
	if !c.NoTHP {
		return Binary, args, nil
	}
	launcher := c.Launcher
	if launcher == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", nil, fmt.Errorf("qemu launcher: %w", err)
		}
		launcher = exe
	}
	return launcher, append([]string{NoTHPArg, Binary}, args...), nil
}

// THPDisabled reads whether transparent huge pages are off for process
// pid (the THP_enabled line of /proc/PID/status: 0 when PR_SET_THP_DISABLE
// is set).
func THPDisabled(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	var v int
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "THP_enabled: %d", &v); err == nil {
			return v == 0, nil
		}
	}
	return false, fmt.Errorf("pid %d: no THP_enabled in its status", pid)
}
