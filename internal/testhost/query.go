package testhost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
)

// Queries the test suites share: what `vessel info` says, and what the
// kernel's cgroup files hold.

// Instance returns `vessel info NAME --format json`.
func (h *Host) Instance(name string) api.Instance {
	h.t.Helper()
	var inst api.Instance
	if err := json.Unmarshal([]byte(h.OK("info", name, "--format", "json")), &inst); err != nil {
		h.t.Fatalf("info %s: %v", name, err)
	}
	return inst
}

// ServerInfo returns `vessel info --format json` for the host.
func (h *Host) ServerInfo() api.Server {
	h.t.Helper()
	var s api.Server
	if err := json.Unmarshal([]byte(h.OK("info", "--format", "json")), &s); err != nil {
		h.t.Fatalf("info: %v", err)
	}
	return s
}

// CgroupFile reads a file of a container's cgroup; controller names the
// v1 hierarchy (ignored on v2).
func (h *Host) CgroupFile(name, controller, file string) string {
	h.t.Helper()
	return h.CgroupFileAt(filepath.Join(h.CgroupParent(), name), controller, file)
}

// CgroupFileAt reads a file of the cgroup at path (under each hierarchy).
func (h *Host) CgroupFileAt(path, controller, file string) string {
	h.t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", path)
	if cgroups.HostVersion() != cgroups.V2 {
		dir = filepath.Join("/sys/fs/cgroup", controller, path)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		h.t.Fatalf("read cgroup file: %v", err)
	}
	return strings.TrimSpace(string(b))
}
