package benchutil

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testhost"
)

// FirstTouch measures how fast this machine gives a process fresh memory:
// mib MiB of anonymous memory in small pages populated for writing
// (MADV_POPULATE_WRITE: each page allocated, zeroed and mapped), in MB/s.
// A stateful restore fills that much new memory while it reads its image,
// where fio's read reuses one buffer; in a VM whose hypervisor takes back
// free memory (this project's machines: virtio-balloon), the first touch
// can be as slow as the disk.
func FirstTouch(r *testhost.Runner, mib int) float64 {
	size := mib << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		r.Fatalf("first touch: mmap: %v", err)
	}
	defer unix.Munmap(mem) //nolint:errcheck // the bench's own mapping
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil {
		r.Fatalf("first touch: madvise: %v", err)
	}
	t0 := time.Now()
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
		r.Fatalf("first touch: MADV_POPULATE_WRITE: %v", err)
	}
	return float64(size) / time.Since(t0).Seconds() / 1e6
}
