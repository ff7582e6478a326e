// Package guests is the guest lane: vessel installed from its .deb on
// Debian 13 guests of the host image (make host-image), under systemd with
// the unified cgroup v2 hierarchy, booted by scripts/vmlab under QEMU. It
// checks what the machine the other root tests run on cannot: systemd's
// units and delegation, every limit in the cgroup v2 files and under a
// workload, and snapshots and live moves between two kernels.
package guests

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped: guest lane tests need root and QEMU (make test)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
