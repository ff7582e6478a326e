package qemu

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A VM's guest RAM in a shared file (Config.RAMFile, on a shmem
// filesystem) outlives its QEMU: a stateful restore kills the VM's QEMU
// and starts a new one that maps the same file and loads the snapshot's
// state into it. Its pages are then already allocated and faulted in
// once; a fresh QEMU's anonymous RAM has to get every page from the
// kernel for the first time, which on a host that hands free memory back
// to its own hypervisor costs more than the disk's read (savefile_prealloc.go).
//
// A mapped-ram load writes only the pages its file holds (the block's
// bitmap); every other page must read as zero afterwards, as in fresh RAM.
// PrepareRAMFile punches those out of the file before the new QEMU starts.

// RAMFileStats says what PrepareRAMFile kept of a RAM file.
type RAMFileStats struct {
	// Kept is the file's allocated bytes before (the previous QEMU's
	// pages), Punched the bytes of the ranges punched out; Took the call.
	Kept    int64
	Punched int64
	Took    time.Duration
}

// PrepareRAMFile readies ramFile, the RAM a VM's previous QEMU left, for a
// new QEMU that maps it and loads the mapped-ram state file statePath:
// each range of RAM block block the state does not hold is punched out
// (FALLOC_FL_PUNCH_HOLE: it reads as zero), the rest is left for the load
// to overwrite. A missing ramFile is no error (the new QEMU gets fresh
// pages). On any error, and when the file's size is not the block's,
// ramFile is removed, so a load never sees stale pages: the caller may go
// on with fresh RAM.
func PrepareRAMFile(ramFile, statePath, block string) (RAMFileStats, error) {
	start := time.Now()
	var st RAMFileStats
	fi, err := os.Stat(ramFile)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	err = func() error {
		if err != nil {
			return err
		}
		st.Kept = allocated(fi)
		blocks, err := ReadRAMBlockMaps(statePath)
		if err != nil {
			return err
		}
		var b *RAMBlockMap
		for i := range blocks {
			if blocks[i].Name == block {
				b = &blocks[i]
			}
		}
		if b == nil {
			return fmt.Errorf("%s holds no ram block %q", statePath, block)
		}
		if b.Length != fi.Size() {
			return fmt.Errorf("ram block %q is %d bytes, the ram file %d", block, b.Length, fi.Size())
		}
		fd, err := unix.Open(ramFile, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd) //nolint:errcheck // only punched
		return b.Absent(func(off, n int64) error {
			st.Punched += n
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		})
	}()
	st.Took = time.Since(start)
	if err != nil {
		rerr := os.Remove(ramFile)
		if errors.Is(rerr, os.ErrNotExist) {
			rerr = nil
		}
		return RAMFileStats{Took: st.Took}, errors.Join(fmt.Errorf("keep the ram of %s: %w", ramFile, err), rerr)
	}
	return st, nil
}
