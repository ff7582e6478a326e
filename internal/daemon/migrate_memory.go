package daemon

import (
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
// (memoryMode) from what the kernel says of the container and itself.
func (d *Daemon) autoMemoryMode(name string) string {
	anon, known := uint64(0), false
	if cg, err := d.instanceCgroup(name); err == nil {
		if st, err := cg.Stats(); err == nil {
			anon, known = st.MemoryAnon, true
		}
	}
	uffd := haveUserfaultfd()
	mode := memoryMode(anon, known, uffd)
	d.log.Info("memory mode auto", "name", name, "anon_memory_kib", anon>>10, "known", known, "userfaultfd", uffd, "mode", mode)
	return mode
}

// memoryMode is the policy of --memory=auto: copy the memory while frozen
// when the container has at most autoCopyMaxBytes of anonymous memory (or
// the kernel has no userfaultfd, which post-copy needs); post-copy
// otherwise, also when its memory cannot be read.
func memoryMode(anon uint64, known, userfaultfd bool) string {
	switch {
	case !userfaultfd:
		return api.MemoryCopy
	case known && anon <= autoCopyMaxBytes:
		return api.MemoryCopy
	}
	return api.MemoryLazy
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
