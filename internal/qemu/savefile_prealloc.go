package qemu

import (
	"fmt"
	"strings"
)

// preallocThreads is the threads QEMU populates a load's RAM with.
const preallocThreads = 2

// preallocRAM has QEMU populate all of its guest RAM now (qom-set
// prealloc=on on each memory backend: MADV_POPULATE_WRITE from
// preallocThreads threads), before a mapped-ram load reads into it.
//
// Why: QEMU 10's incoming multifd channels open the state file O_DIRECT,
// but btrfs (kernel 6.18 here) serves an O_DIRECT read into memory that was
// never touched through the page cache, and a fresh QEMU's guest RAM is
// exactly that: the whole load then goes through the cache, charged to the
// loading QEMU's memory cgroup beside the RAM it fills (its limit is the
// RAM plus QEMU's overhead: it hits the limit half way and reclaims the
// file's cache page by page, memory.failcnt ~400k for 2 GiB). Into
// populated memory the reads are direct. The faults are the same ones the
// reads would take, done first and in batches; the cost is that RAM the
// file holds as zero pages (holes) is populated too. QEMU is in its cgroup
// by now (a load's caller moves it there before Load), so the RAM is
// charged there.
//
// So a load populates only when the file holds most of the guest's RAM
// (populateWorth): a VM saved with little of its memory in use (the rest
// holes in the file) is loaded as before, its untouched RAM left
// unallocated, rather than grown to its whole size by the restore.
func preallocRAM(mon Runner) error {
	var objs []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := run(mon, "qom-list", map[string]string{"path": "/objects"}, &objs); err != nil {
		return fmt.Errorf("prealloc: %w", err)
	}
	n := 0
	for _, o := range objs {
		if !strings.HasPrefix(o.Type, "child<memory-backend-") {
			continue
		}
		p := "/objects/" + o.Name
		if err := run(mon, "qom-set", map[string]any{"path": p, "property": "prealloc-threads", "value": preallocThreads}, nil); err != nil {
			return fmt.Errorf("prealloc %s: %w", p, err)
		}
		if err := run(mon, "qom-set", map[string]any{"path": p, "property": "prealloc", "value": true}, nil); err != nil {
			return fmt.Errorf("prealloc %s: %w", p, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("prealloc: no memory backend under /objects")
	}
	return nil
}

// populateWorth reports whether a mapped-ram file of fileBytes allocated
// bytes holds at least half of the guest's RAM (QEMU's base-memory): then
// populating all of it first costs little memory the load would not take
// anyway. A QEMU that does not report its memory size gets the populate.
func populateWorth(mon Runner, fileBytes int64) (bool, error) {
	var mem struct {
		Base int64 `json:"base-memory"`
	}
	if err := run(mon, "query-memory-size-summary", nil, &mem); err != nil {
		return false, fmt.Errorf("prealloc: %w", err)
	}
	return mem.Base == 0 || 2*fileBytes >= mem.Base, nil
}
