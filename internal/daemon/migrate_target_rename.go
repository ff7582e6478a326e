package daemon

import (
	"fmt"
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
// is on its kernel command line, read by its init at each boot.

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

