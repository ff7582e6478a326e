package daemon

import (
	"fmt"
	"unsafe"

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
	uffd, wp := userfaultfdFeatures()
	mode := memoryMode(anon, known, uffd, wp)
	d.log.Info("memory mode auto", "name", name, "anon_memory_kib", anon>>10, "known", known, "userfaultfd", uffd,
		"wp_async", wp, "mode", mode)
	return mode
}

// memoryMode is the first choice of --memory=auto: copy the memory while
// frozen when the container has at most autoCopyMaxBytes of anonymous
// memory (or the kernel has no userfaultfd, which both pre-copy and
// post-copy need); pre-copy where CRIU can track the writes (userfaultfd
// asynchronous write protection, CRIU patch 0016), as a trial its first
// passes confirm or drop for post-copy (precopyVerdict); post-copy
// otherwise, also when the container's memory cannot be read.
func memoryMode(anon uint64, known, userfaultfd, wpAsync bool) string {
	switch {
	case !userfaultfd:
		return api.MemoryCopy
	case known && anon <= autoCopyMaxBytes:
		return api.MemoryCopy
	case wpAsync:
		return api.MemoryPrecopy
	}
	return api.MemoryLazy
}

// The two modes' freezes apart from pre-copy's last dirty pages, from
// bench/migrate on a 2-core VM (same runs, medians): idle, pre-copy 108 ms
// and post-copy 129 ms (post-copy's lazy-pages daemon connects to the
// source's page server in the frozen window); 2 GiB rewritten at 64
// MiB/s, 195 and 169 ms (pre-copy's final dump walks every page against
// its parent images, and the target restores a chain of them).
const (
	lazyFreezeSeconds          = 0.021 // post-copy's, beyond pre-copy's
	precopyFreezeSecondsPerGiB = 0.023 // pre-copy's, beyond post-copy's
)

// precopyVerdict decides --memory=auto's trial of pre-copy from its first
// two memory passes: whether pre-copy's freeze would be shorter than
// post-copy's. From the passes: the container's dirty rate w (what the
// second pass found over the first's time), the rate r a pass moves pages
// at (CRIU's pre-dump rate and the link's, one after the other), and a
// pass's fixed cost a. A pass of D bytes lasts a + D/r while the
// container dirties w per second: the passes converge (w < r/2 required)
// on D* = w·a / (1 - w/r), which the frozen dump copies at the slower of
// CRIU and the link. Pre-copy's freeze also grows with the memory's size
// (precopyFreezeSecondsPerGiB) where post-copy's has a fixed part more
// (lazyFreezeSeconds). With one pass only (it was small), pre-copy has
// converged and costs no more than that.
func precopyVerdict(p []api.MemoryPass) (bool, string) {
	if len(p) < 2 || p[0].Bytes <= 0 || p[0].Seconds <= 0 {
		return true, "pre-copy: converged in its first pass"
	}
	const mib = 1 << 20
	p0, p1 := p[0], p[1]
	crit := float64(p0.Bytes) / p0.Seconds
	link := crit
	if p0.SendSeconds > 0 {
		link = float64(p0.Bytes) / p0.SendSeconds
	}
	r := 1 / (1/crit + 1/link)
	w := float64(p1.Bytes) / p0.Seconds
	a := max(0, p1.Seconds-float64(p1.Bytes)/crit)
	if w >= r/2 {
		return false, fmt.Sprintf("post-copy: dirty rate %.0f MiB/s against passes at %.0f MiB/s, pre-copy would not converge",
			w/mib, r/mib)
	}
	final := w * a / (1 - w/r)
	extra := final/min(crit, link) + precopyFreezeSecondsPerGiB*float64(p0.Bytes)/(1<<30)
	why := fmt.Sprintf("dirty rate %.0f MiB/s, passes at %.0f MiB/s, link %.0f MiB/s: pre-copy's last %.1f MiB and %.0f MiB of memory freeze ~%.0f ms more, post-copy's page server ~%.0f ms",
		w/mib, r/mib, link/mib, final/mib, float64(p0.Bytes)/mib, extra*1000, lazyFreezeSeconds*1000)
	if extra > lazyFreezeSeconds {
		return false, "post-copy: " + why
	}
	return true, "pre-copy: " + why
}

// userfaultfdFeatures says whether the kernel offers userfaultfd(2), and
// whether it tracks writes asynchronously (UFFD_FEATURE_WP_ASYNC, which
// CRIU's pre-copy passes use where there is no soft-dirty tracking).
func userfaultfdFeatures() (uffd, wpAsync bool) {
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno != 0 {
		return errno != unix.ENOSYS, false
	}
	defer unix.Close(int(fd))
	// struct uffdio_api { __u64 api, features, ioctls; }, UFFDIO_API
	// = _IOWR(0xAA, 0x3F, struct uffdio_api); the kernel answers the
	// features it has. Debian 12's headers predate WP_ASYNC (1 << 15).
	const uffdioAPI, uffdAPI, featureWPAsync = 0xc018aa3f, 0xaa, 1 << 15
	api := [3]uint64{uffdAPI, 0, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		return true, false
	}
	return true, api[1]&featureWPAsync != 0
}
