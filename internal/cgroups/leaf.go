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

// TopLevelCPUWeight returns the CPU weight (v2 scale) of the top-level
// cgroup path lives under, e.g. /vessel-control.slice for
// /vessel-control.slice/vesseld.service: the weight that cgroup competes
// with beside its siblings at the root, whoever set it (vesseld or a
// systemd slice). It also returns that cgroup's path.
func TopLevelCPUWeight(path string) (string, uint64, error) {
	if !filepath.IsAbs(path) || path == "/" {
		return "", 0, fmt.Errorf("%w: %q", ErrInvalidPath, path)
	}
	top := "/" + strings.SplitN(strings.TrimPrefix(filepath.Clean(path), "/"), "/", 2)[0]
	if HostVersion() == V2 {
		w, err := readUint(filepath.Join(unifiedMount, top), "cpu.weight")
		return top, w, err
	}
	mnt, err := occgroups.FindCgroupMountpoint("", "cpu")
	if err != nil {
		return top, 0, fmt.Errorf("cpu hierarchy: %w", err)
	}
	s, err := readUint(filepath.Join(mnt, top), "cpu.shares")
	return top, CPUSharesToWeight(s), err
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
