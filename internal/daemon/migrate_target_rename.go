package daemon

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/runtime"
)

// A move that renames (`vessel move web1 beta:web2`) moves the same
// machine under a new name: the target gives the container's root the new
// name in /etc/hostname and /etc/hosts and keeps its machine ID (writeName,
// in start), and a live move's checkpoint the new name in its UTS
// namespace (nameImages). Its snapshots keep the name they were taken
// under (state.Snapshot.TakenAs): a restore renames them then
// (restoreIdentity). A copy is another machine: writeIdentity. A VM's name
// is on its kernel command line, read by its init at each boot: a cold
// move boots it under the new name; a live one renames the running guest
// through its agent (renameGuest).

// renamed says the instance takes another name here than on the source.
func (m *migrationTarget) renamed() bool {
	return m.hello.SourceName != "" && m.hello.SourceName != m.name
}

// nameImages names a live rename's checkpoint's UTS namespace after the
// instance's new name (runtime.SetUTSName: one small image rewritten),
// before CheckImages shares the images with the container's root. It runs
// in the frozen window, for a move that renames only; once.
func (m *migrationTarget) nameImages() error {
	if !m.hello.Live || !m.renamed() || m.inst.record().IsVM() || m.imagesNamed {
		return nil
	}
	m.imagesNamed = true
	t0 := time.Now()
	if err := runtime.SetUTSName(m.images, m.name); err != nil {
		return fmt.Errorf("name the checkpoint %s: %w", m.name, err)
	}
	m.d.log.Debug("migration target: checkpoint renamed", "name", m.name, "from", m.hello.SourceName, "took", time.Since(t0))
	return nil
}

// guestRenameWait bounds renameGuest's exec.
const guestRenameWait = 30 * time.Second

// renameGuest gives a VM that moved live under a new name that name in
// its running kernel and its /etc/hostname (what its init would have done
// at boot from vessel.hostname=; its next boot does it anyway): one exec
// of the image's sh through its agent, once the guest runs here, outside
// the frozen window and beside the rest of the move (the move does not
// wait for it: a VM's switch-over is timed to the target's "resumed").
// Best effort: a guest that does not answer (no sh, no agent) keeps its
// old name until its next boot, with a warning.
func (m *migrationTarget) renameGuest(ctx context.Context) {
	if !m.renamed() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, guestRenameWait)
	defer cancel()
	var out bytes.Buffer
	t0 := time.Now()
	code, err := m.d.agents.Exec(ctx, m.name, m.d.vmAgentSocket(m.name), runtime.ExecOptions{
		Args:   []string{"/bin/sh", "-c", `printf %s "$1" > /proc/sys/kernel/hostname && printf '%s\n' "$1" > /etc/hostname`, "sh", m.name},
		Stdout: &out, Stderr: &out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		m.d.log.Warn("the VM keeps its old name until its next boot: renaming the running guest failed", "name", m.name, "was", m.hello.SourceName, "err", err)
		return
	}
	m.d.log.Debug("migration target: guest renamed", "name", m.name, "from", m.hello.SourceName, "took", time.Since(t0))
}
