package daemon

import (
	"testing"

	"github.com/vesselhost/vessel/internal/api"
)

func TestMemoryMode(t *testing.T) {
	for _, tc := range []struct {
		anon        uint64
		known, uffd bool
		want        string
	}{
		{0, true, true, api.MemoryCopy},
		{autoCopyMaxBytes, true, true, api.MemoryCopy},
		{autoCopyMaxBytes + 1, true, true, api.MemoryLazy},
		{2 << 30, true, true, api.MemoryLazy},
		{0, false, true, api.MemoryLazy},       // unknown: the freeze must not grow with memory
		{2 << 30, true, false, api.MemoryCopy}, // no userfaultfd: post-copy impossible
		{0, false, false, api.MemoryCopy},
	} {
		if got := memoryMode(tc.anon, tc.known, tc.uffd); got != tc.want {
			t.Errorf("memoryMode(%d, known %v, userfaultfd %v) = %s, want %s", tc.anon, tc.known, tc.uffd, got, tc.want)
		}
	}
}
