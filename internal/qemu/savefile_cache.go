package qemu

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dropCacheEvery is how often a mapped-ram load drops the state file's
// page cache.
const dropCacheEvery = 10 * time.Millisecond

// dropCacheWhile drops the page cache of the file at path every interval
// (posix_fadvise DONTNEED over the whole file: clean, unlocked pages only,
// so a page a read is filling stays) until the returned function is
// called, which also drops it once more. Best effort: a file that does not
// open gives a no-op.
//
// Why: QEMU 10's incoming multifd channels open the file O_DIRECT, but
// btrfs (kernel 6.18 here) serves an O_DIRECT read into memory that was
// never touched through the page cache (a fresh QEMU's guest RAM is
// exactly that), so the load's reads are cached and charged to the
// loading QEMU's memory cgroup beside the guest RAM they fill. A VM's limit
// is its RAM plus QEMU's overhead: without the drop the cgroup reaches its
// limit half way through a load and reclaims the cache page by page
// (memory.failcnt ~400k for a 2 GiB restore). Every page of the file is
// read once, so nothing is lost by dropping it. Not tied to Load's polls:
// QEMU answers no QMP while its loading coroutine hands the RAM to the
// channels (it spins in the main loop), so the polls stall for most of it.
func dropCacheWhile(path string, interval time.Duration) (stop func()) {
	f, err := os.Open(path)
	if err != nil {
		return func() {}
	}
	fd := int(f.Fd())
	drop := func() { _ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) }
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				drop()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		drop()
		f.Close()
	}
}
