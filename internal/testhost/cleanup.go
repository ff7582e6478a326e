package testhost

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vesselhost/vessel/internal/runtime"
)

// teardown deletes what the test left through the API, stops the daemon
// (which then releases the pool, bridge and cgroups), and checks that
// nothing is left on the machine. Whatever is left anyway (the test failed,
// or vessel leaked) is removed by force and, if the test had passed, reported
// as a leak.
// KeepLogsEnv names a directory: when it is set, every host's daemon log is
// copied there at teardown, named after the host's root (benchmarks keep
// the daemons' debug timings this way), with the CRIU logs of the moves
// daemons started with VESSEL_KEEP_MIGRATION_FILES=1 kept.
const KeepLogsEnv = "VESSEL_KEEP_LOGS"

func (h *Host) Teardown() {
	if h.pid != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if insts, err := h.client.Instances(ctx); err == nil {
			for _, i := range insts {
				if op, err := h.client.DeleteInstance(ctx, i.Name, true); err == nil {
					_ = op.Wait(ctx, nil)
				}
			}
		}
		cancel()
		h.StopDaemon()
	}
	leaks := h.Leftovers()
	if len(leaks) > 0 {
		if !h.t.Failed() {
			h.t.Errorf("host %s left behind:\n  %s\ndaemon log:\n%s", h.id, strings.Join(leaks, "\n  "), h.Log())
		}
		h.ForceCleanup()
		if again := h.Leftovers(); len(again) > 0 {
			h.t.Errorf("forced cleanup could not remove:\n  %s", strings.Join(again, "\n  "))
		}
	}
	if dir := os.Getenv(KeepLogsEnv); dir != "" {
		// Asked for: a copy of every daemon's log (benchmarks' debug laps).
		if b, err := os.ReadFile(h.logPath); err == nil {
			_ = os.MkdirAll(dir, 0o700)
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(h.root)+".log"), b, 0o600)
		}
		// and CRIU's logs of the moves a daemon kept (--keep-migration-files)
		kept, _ := filepath.Glob(filepath.Join(h.runDir, "migrate-kept", "*", "*.log"))
		for _, l := range kept {
			if b, err := os.ReadFile(l); err == nil {
				name := filepath.Base(h.root) + "-" + filepath.Base(filepath.Dir(l)) + "-" + filepath.Base(l)
				_ = os.WriteFile(filepath.Join(dir, name), b, 0o600)
			}
		}
	}
	if h.t.Failed() && strings.HasPrefix(h.logPath, h.root+"/") {
		// Keep the log of a failed run outside the root that goes away.
		kept := filepath.Join(os.TempDir(), "vessel-"+filepath.Base(h.root)+".log")
		_ = os.Rename(h.logPath, kept)
		h.logPath = kept
	}
	os.RemoveAll(h.root)
	os.RemoveAll(h.runDir)
	if !h.t.Failed() {
		os.Remove(h.logPath)
	} else {
		h.t.Logf("daemon log kept at %s", h.logPath)
	}
}

// leftovers lists what the host still holds on the machine.
func (h *Host) Leftovers() []string {
	var out []string
	for _, m := range h.mounts() {
		out = append(out, "mount "+m)
	}
	if l, _ := exec.Command("losetup", "-j", filepath.Join(h.root, "disks", "default.img")).Output(); len(strings.TrimSpace(string(l))) > 0 {
		out = append(out, "loop "+strings.TrimSpace(string(l)))
	}
	if h.netCmd("ip", "link", "show", h.bridge).Run() == nil {
		out = append(out, "bridge "+h.bridge)
	}
	if h.hasFilterTable() {
		out = append(out, "nftables table bridge "+h.filterTable())
	}
	for _, table := range []string{"filter", "nat"} {
		rules, _ := h.netCmd("iptables", "-w", "-t", table, "-S").Output()
		for _, r := range strings.Split(string(rules), "\n") {
			if strings.Contains(r, "vessel:"+h.bridge) {
				out = append(out, "iptables "+table+" "+r)
			}
		}
	}
	for _, d := range h.cgroupDirs() {
		out = append(out, "cgroup "+d)
	}
	for _, id := range h.RuncContainers() {
		out = append(out, "runc container "+id)
	}
	for _, pid := range h.qemuPids() {
		out = append(out, fmt.Sprintf("qemu pid %d", pid))
	}
	return out
}

// qemuPids returns the QEMU processes of the host's VMs: those whose
// pidfile is under its run directory.
func (h *Host) qemuPids() []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "qemu-system-x86_64" {
			continue
		}
		for i := 1; i < len(args); i++ {
			if args[i-1] == "-pidfile" && under(args[i], h.runDir) {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// mounts returns mount points under the host's root, deepest first.
func (h *Host) mounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (under(fields[4], h.root) || under(fields[4], h.runDir)) {
			out = append(out, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// cgroupDirs returns the host's cgroups in every hierarchy: the cgroup
// parent and the control cgroup (PARENT-control, where vesseld and the
// helpers it starts run; a helper still running when the daemon stops
// keeps it). The hierarchies are the v1 controllers' and the unified one
// under /sys/fs/cgroup (hybrid), or /sys/fs/cgroup itself (v2 only).
func (h *Host) cgroupDirs() []string {
	return cgroupDirsIn(cgroupRoots(cgroupMount), h.cgParent)
}

// cgroupMount is where the cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// cgroupRoots returns the roots of the hierarchies mounted at mnt: mnt
// itself when it is a cgroup2 tree, else its subdirectories (v1's
// controllers and a hybrid host's unified tree).
func cgroupRoots(mnt string) []string {
	if _, err := os.Stat(filepath.Join(mnt, "cgroup.controllers")); err == nil {
		return []string{mnt}
	}
	var out []string
	ents, _ := os.ReadDir(mnt)
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(mnt, e.Name()))
		}
	}
	return out
}

// cgroupDirsIn returns parent and parent-control in each root where they
// exist.
func cgroupDirsIn(roots []string, parent string) []string {
	if parent == "" || parent == "/" {
		return nil
	}
	var out []string
	for _, r := range roots {
		for _, p := range []string{filepath.Join(r, parent), filepath.Join(r, parent+"-control")} {
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// killCgroupTree kills every process in a cgroup and its children (cgroup
// v2's cgroup.kill where there is one, else each pid in cgroup.procs) and
// waits up to 5 s for them to be gone.
func killCgroupTree(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, walkErr error) error {
			if walkErr != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil //nolint:nilerr // a cgroup gone meanwhile has nothing to kill
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	for i := 0; i < 100 && cgroupHasProcs(dir); i++ {
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupHasProcs says whether a process is in the cgroup or below it.
func cgroupHasProcs(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "cgroup.procs" {
			if b, _ := os.ReadFile(p); len(strings.TrimSpace(string(b))) > 0 {
				found = true
			}
		}
		return nil
	})
	return found
}

func (h *Host) RuncContainers() []string {
	out, err := exec.Command(runtime.DefaultRuncPath(), "--root", filepath.Join(h.runDir, "runc"), "list", "-q").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// netCmd runs a network tool in the host's network namespace.
func (h *Host) netCmd(name string, args ...string) *exec.Cmd {
	if h.opts.Netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.opts.Netns, "--", name}, args...)...)
}

// ForceCleanup removes everything the host may hold, without the daemon
// (the teardown does when the leak check finds something).
func (h *Host) ForceCleanup() {
	if h.pid != 0 {
		h.KillDaemon()
	}
	root := filepath.Join(h.runDir, "runc")
	for _, id := range h.RuncContainers() {
		_ = exec.Command(runtime.DefaultRuncPath(), "--root", root, "kill", "--all", id, "KILL").Run()
		_ = exec.Command(runtime.DefaultRuncPath(), "--root", root, "delete", "--force", id).Run()
	}
	for _, pid := range h.qemuPids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(200 * time.Millisecond)
	for _, m := range h.mounts() {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if l, _ := exec.Command("losetup", "-j", filepath.Join(h.root, "disks", "default.img")).Output(); len(l) > 0 {
		dev, _, _ := strings.Cut(string(l), ":")
		_ = exec.Command("losetup", "-d", dev).Run()
	}
	_ = h.netCmd("ip", "link", "del", h.bridge).Run()
	h.deleteFilterTable()
	for _, table := range []string{"filter", "nat"} {
		rules, _ := h.netCmd("iptables", "-w", "-t", table, "-S").Output()
		for _, r := range strings.Split(string(rules), "\n") {
			if strings.Contains(r, "vessel:"+h.bridge) && strings.HasPrefix(r, "-A ") {
				args := append([]string{"-w", "-t", table, "-D"}, splitRule(strings.TrimPrefix(r, "-A "))...)
				_ = h.netCmd("iptables", args...).Run()
			}
		}
	}
	for _, d := range h.cgroupDirs() {
		// What still runs there (a helper the daemon left: a stuck CRIU,
		// a shim not yet moved) is the host's own: it goes too.
		killCgroupTree(d)
		removeCgroupTree(d)
	}
}

// splitRule splits an iptables -S line, keeping quoted comments whole.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// removeCgroupTree removes a cgroup and its children, deepest first.
func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// under says whether path is dir or inside it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }
