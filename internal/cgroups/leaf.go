package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
)

// cgroup v2's no-internal-processes rule: a cgroup that hands controllers
// to its children (cgroup.subtree_control) may hold no processes itself.
// Under systemd, the containers' parent is a delegated unit's cgroup
// (vessel-instances.service); systemd needs a process in the unit, so that
// process (`vesseld hold`) moves itself into a leaf below it, and vesseld
// checks at start that the parent holds no process of its own.

// unifiedMount is where the v2 hierarchy is mounted.
const unifiedMount = "/sys/fs/cgroup"

// ErrInternalProcesses says a cgroup meant to have child cgroups with
// controllers holds processes itself.
var ErrInternalProcesses = errors.New("cgroup holds processes of its own")

// EnterLeaf moves the calling process into the child cgroup name of the
// cgroup it is in (made if missing) and returns that child's path. On a v1
// host it does nothing and returns "": v1 has no such rule.
func EnterLeaf(name string) (string, error) {
	if HostVersion() != V2 {
		return "", nil
	}
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%w: leaf %q", ErrInvalidPath, name)
	}
	cur, err := ProcessCgroup(os.Getpid(), "")
	if err != nil {
		return "", err
	}
	leaf := filepath.Join(cur, name)
	dir := filepath.Join(unifiedMount, leaf)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("make leaf cgroup %s: %w", leaf, err)
	}
	if err := occgroups.WriteCgroupProc(dir, os.Getpid()); err != nil {
		return "", fmt.Errorf("enter leaf cgroup %s: %w", leaf, err)
	}
	return leaf, nil
}

// CheckNoInternalProcesses fails with ErrInternalProcesses when the v2
// cgroup at path holds processes directly (not in a child). A missing
// cgroup, and any cgroup on v1, passes.
func CheckNoInternalProcesses(path string) error {
	if HostVersion() != V2 {
		return nil
	}
	pids, err := occgroups.GetPids(filepath.Join(unifiedMount, path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("processes of cgroup %s: %w", path, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("%w: %s has pids %v; on cgroup v2 the containers' parent must hold none "+
			"(under systemd, vessel-instances.service runs `vesseld hold`, which moves itself into a leaf)",
			ErrInternalProcesses, path, pids)
	}
	return nil
}

// SiblingCPUWeights returns the CPU weights (v2 scale) that decide how two
// cgroups share the CPU under contention: those of the two sibling cgroups
// below their common ancestor that hold a and b. E.g. for vesseld in
// /vessel.slice/vessel-control.slice/vesseld.service and containers in
// /vessel.slice/vessel-instances.service, the weights of
// vessel-control.slice and vessel-instances.service; for /vessel-control and
// /vessel, their own. Whoever set them (vesseld or systemd), they are read
// from the kernel.
func SiblingCPUWeights(a, b string) (wa, wb uint64, err error) {
	sa, sb, err := siblings(a, b)
	if err != nil {
		return 0, 0, err
	}
	if wa, err = cpuWeight(sa); err != nil {
		return 0, 0, err
	}
	wb, err = cpuWeight(sb)
	return wa, wb, err
}

// siblings returns the ancestors-or-selves of a and b that are children of
// their deepest common ancestor.
func siblings(a, b string) (string, string, error) {
	for _, p := range []string{a, b} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return "", "", fmt.Errorf("%w: %q", ErrInvalidPath, p)
		}
	}
	ea, eb := strings.Split(a[1:], "/"), strings.Split(b[1:], "/")
	i := 0
	for i < len(ea) && i < len(eb) && ea[i] == eb[i] {
		i++
	}
	if i == len(ea) || i == len(eb) {
		return "", "", fmt.Errorf("%w: %s and %s: one holds the other", ErrInvalidPath, a, b)
	}
	return "/" + strings.Join(ea[:i+1], "/"), "/" + strings.Join(eb[:i+1], "/"), nil
}

// cpuWeight reads a cgroup's CPU weight (v1: cpu.shares, converted).
func cpuWeight(path string) (uint64, error) {
	if HostVersion() == V2 {
		return readUint(filepath.Join(unifiedMount, path), "cpu.weight")
	}
	mnt, err := occgroups.FindCgroupMountpoint("", "cpu")
	if err != nil {
		return 0, fmt.Errorf("cpu hierarchy: %w", err)
	}
	s, err := readUint(filepath.Join(mnt, path), "cpu.shares")
	return CPUSharesToWeight(s), err
}

func readUint(dir, file string) (uint64, error) {
	s, err := occgroups.ReadFile(dir, file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/%s: %w", dir, file, err)
	}
	return n, nil
}
