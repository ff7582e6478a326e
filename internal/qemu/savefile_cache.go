package qemu

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache returns a function that drops the page cache of the file at
// path (posix_fadvise DONTNEED over the whole file: clean pages only, so a
// page a read is filling stays), and one that closes the file. Best
// effort: a file that does not open gives two no-ops.
//
// Why during a load: QEMU 10 reads part of a mapped-ram file through the
// page cache on the incoming side, and that cache is charged to the
// loading QEMU's memory cgroup beside the guest RAM it fills. A VM's limit
// is its RAM plus QEMU's overhead, so without the drop the cgroup reaches
// its limit half way through a load and reclaims the cache page by page
// for the rest (memory.failcnt ~400k for a 2 GiB restore). A page of the
// file is read once, so nothing is lost by dropping what is already read.
func dropCache(path string) (drop, done func()) {
	f, err := os.Open(path)
	if err != nil {
		return func() {}, func() {}
	}
	fd := int(f.Fd())
	drop = func() { _ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) }
	return drop, func() { f.Close() }
}
