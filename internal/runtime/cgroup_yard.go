package runtime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// CRIU reads a container's cgroups through a "yard": a directory with each
// cgroup hierarchy mounted in it. Without one it mounts every hierarchy
// afresh to dump a container (and unmounts it after): on cgroup v1's ten
// hierarchies ~6-9 ms of the frozen window here. The hierarchies are
// mounted on the host already, so vessel gives CRIU a yard of symlinks to
// them (CRIU opens each entry as a directory, following the link), named
// as CRIU names a hierarchy: its controllers as /proc/self/cgroup lists
// them, "name=" dropped, "unified" for cgroup v2.

// cgroupYardDir is the yard's place in the state directory (not a valid
// container id).
const cgroupYardDir = ".criu-cgyard"

// makeCgroupYard (re)creates the yard at dir from this process's
// hierarchies (procCgroup: /proc/self/cgroup) and the mounts (procMounts:
// its mountinfo). A hierarchy that is not mounted leaves the yard unused:
// CRIU would fail on the missing entry, where it can mount it itself.
func makeCgroupYard(dir, procCgroup string, mounts []*mountinfo.Info) error {
	links, err := cgroupYardLinks(procCgroup, mounts)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// cgroupYardLinks maps each yard entry to the mount point of its
// hierarchy.
func cgroupYardLinks(procCgroup string, mounts []*mountinfo.Info) (map[string]string, error) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	links := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls := parts[1]
		name, target := ctrls, ""
		if ctrls == "" {
			name = "unified"
		}
		name = strings.TrimPrefix(name, "name=")
		for _, m := range mounts {
			if m.Root != "/" {
				continue
			}
			switch {
			case ctrls == "" && m.FSType == "cgroup2":
			case ctrls != "" && m.FSType == "cgroup" && hasAll(strings.Split(m.VFSOptions, ","), strings.Split(ctrls, ",")):
			default:
				continue
			}
			target = m.Mountpoint
			break
		}
		if target == "" {
			return nil, fmt.Errorf("cgroup hierarchy %q is not mounted", ctrls)
		}
		links[name] = target
	}
	return links, sc.Err()
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// cgroupYard is the yard for CRIU, made once; "" (CRIU mounts its own)
// if it cannot be made.
func (r *Runtime) cgroupYard() string {
	r.yardOnce.Do(func() {
		mounts, err := mountinfo.GetMounts(nil)
		if err == nil {
			dir := filepath.Join(r.cfg.StateDir, cgroupYardDir)
			if err = makeCgroupYard(dir, "/proc/self/cgroup", mounts); err == nil {
				r.yard = dir
				return
			}
		}
		r.cfg.Log.Warn("CRIU mounts the cgroup hierarchies itself", "err", err)
	})
	return r.yard
}
