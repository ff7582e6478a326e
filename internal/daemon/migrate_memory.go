package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
)

// autoCopyMaxBytes is the memory below which --memory=auto copies it while
// frozen. Measured on a 2-core VM (bench/migrate): post-copy adds ~20 ms to
// an idle container's freeze (the lazy-pages daemon, its connection to the
// source, the first faults), and copying adds ~3 ms per MiB (512 MiB: 1.5
// s); they break even near 7 MiB, and below that copying is the shorter
// freeze, with nothing depending on the source once the target runs. The
// threshold stays a little under the break-even point.
const autoCopyMaxBytes = 6 << 20

// autoMemoryMode picks the memory mode of a live move with --memory=auto
// from the container's anonymous memory; copy where this kernel has no
// userfaultfd (post-copy needs it).
func (d *Daemon) autoMemoryMode(name string) string {
	if !haveUserfaultfd() {
		d.log.Info("memory mode auto: no userfaultfd on this kernel", "name", name, "mode", api.MemoryCopy)
		return api.MemoryCopy
	}
	mode, anon := api.MemoryLazy, "unknown"
	if cg, err := d.instanceCgroup(name); err == nil {
		if st, err := cg.Stats(); err == nil {
			anon = fmt.Sprintf("%d KiB", st.MemoryAnon>>10)
			if st.MemoryAnon <= autoCopyMaxBytes {
				mode = api.MemoryCopy
			}
		}
	}
	d.log.Info("memory mode auto", "name", name, "anon_memory", anon, "mode", mode)
	return mode
}

// haveUserfaultfd says whether the kernel offers userfaultfd(2).
func haveUserfaultfd() bool {
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno != 0 {
		return errno != unix.ENOSYS
	}
	unix.Close(int(fd))
	return true
}
