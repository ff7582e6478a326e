package testhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PoolPath returns the host path of the storage pool (btrfs or dir).
func (h *Host) PoolPath() string {
	return filepath.Join(h.root, "storage-pools", "default")
}

// ContainerPath returns the host path of a container's root filesystem.
func (h *Host) ContainerPath(name string) string {
	return filepath.Join(h.PoolPath(), "containers", name)
}

// Install copies a program into a container's /bin.
func (h *Host) Install(name, program string) {
	h.t.Helper()
	b, err := os.ReadFile(program)
	if err != nil {
		h.t.Fatalf("%v", err)
	}
	if err := os.WriteFile(filepath.Join(h.ContainerPath(name), "bin", filepath.Base(program)), b, 0o755); err != nil {
		h.t.Fatalf("%v", err)
	}
}

// VerifyMemhog asks the memhog in container name to check its memory and
// returns its verdict ("ok", or where the first difference is).
func (h *Host) VerifyMemhog(name string) string {
	h.t.Helper()
	h.OK("exec", name, "--", "sh", "-c", "rm -f /tmp/memhog.ready.verify; kill -USR1 $(pidof memhog)")
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memhog.ready.verify ]; do sleep 0.1; done")
	return strings.TrimSpace(h.OK("exec", name, "--", "cat", "/tmp/memhog.ready.verify"))
}

// StartMemhog copies memhog into a running container and starts it in the
// background holding mib MiB, and waits until its memory is filled.
func (h *Host) StartMemhog(name, memhog string, mib int) {
	h.t.Helper()
	h.Install(name, memhog)
	// exec waits for its command's output pipes: the background process
	// gets its own session and no inherited descriptors.
	h.OK("exec", name, "--", "sh", "-c", fmt.Sprintf("rm -f /tmp/memhog.ready; setsid memhog %d /tmp/memhog.ready </dev/null >/dev/null 2>&1 &", mib))
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memhog.ready ]; do sleep 0.1; done")
}

// StartMemtick copies memtick into a running container and starts it in
// the background holding mib MiB rewritten at rate MiB/s, and waits until
// its memory is filled.
func (h *Host) StartMemtick(name, memtick string, mib, rate int) {
	h.t.Helper()
	h.Install(name, memtick)
	h.OK("exec", name, "--", "sh", "-c", fmt.Sprintf("rm -f /tmp/memtick.ready; setsid memtick %d %d /tmp/memtick.ready </dev/null >/dev/null 2>&1 &", mib, rate))
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memtick.ready ]; do sleep 0.1; done")
}

// VerifyMemtick asks the memtick in container name to check its memory
// and returns its verdict ("ok", or the first word that is not of the
// instant its sweep position says).
func (h *Host) VerifyMemtick(name string) string {
	h.t.Helper()
	h.OK("exec", name, "--", "sh", "-c", "rm -f /tmp/memtick.ready.verify; kill -USR1 $(pidof memtick)")
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memtick.ready.verify ]; do sleep 0.1; done")
	return strings.TrimSpace(h.OK("exec", name, "--", "cat", "/tmp/memtick.ready.verify"))
}
