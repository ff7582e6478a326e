package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
)

func TestMapUserns(t *testing.T) {
	src := IDMap{HostUID: 1000000, HostGID: 2000000, Size: 65536}
	dst := IDMap{HostUID: 1065536, HostGID: 2065536, Size: 65536}
	block := func(m IDMap) *userns.UsernsEntry {
		return &userns.UsernsEntry{UidMap: []*userns.UidGidExtent{ext(0, m.HostUID, m.Size)}, GidMap: []*userns.UidGidExtent{ext(0, m.HostGID, m.Size)}}
	}
	t.Run("another block becomes this one", func(t *testing.T) {
		dir := checkpoint(t, []uint32{14, 14}, map[uint32]*userns.UsernsEntry{14: block(src)})
		if err := CheckUserns(dir, dst); !errors.Is(err, ErrImages) {
			t.Fatalf("before: %v", err)
		}
		if err := MapUserns(dir, dst); err != nil {
			t.Fatal(err)
		}
		if err := CheckUserns(dir, dst); err != nil {
			t.Fatalf("after: %v", err)
		}
		left, _ := filepath.Glob(filepath.Join(dir, ".remap-*"))
		if len(left) != 0 {
			t.Fatalf("left %v", left)
		}
	})
	t.Run("this block is left alone", func(t *testing.T) {
		dir := checkpoint(t, []uint32{14}, map[uint32]*userns.UsernsEntry{14: block(dst)})
		p := filepath.Join(dir, "userns-14.img")
		before, _ := os.Stat(p)
		if err := MapUserns(dir, dst); err != nil {
			t.Fatal(err)
		}
		if after, _ := os.Stat(p); !os.SameFile(before, after) {
			t.Fatal("rewrote an image that was right")
		}
	})
	for _, tc := range []struct {
		name string
		ns   []uint32
		maps map[uint32]*userns.UsernsEntry
	}{
		{"no user namespace (host root)", []uint32{1}, nil},
		{"a task left in the host's", []uint32{14, 1}, map[uint32]*userns.UsernsEntry{14: block(src)}},
		{"two namespaces", []uint32{14, 15}, map[uint32]*userns.UsernsEntry{14: block(src), 15: block(src)}},
		{"an extra extent", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(0, 1000000, 65536), ext(65536, 0, 1)}, GidMap: block(src).GidMap}}},
		{"a smaller block", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(0, 1000000, 1000)}, GidMap: block(src).GidMap}}},
		{"not from 0", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(1, 1000000, 65536)}, GidMap: block(src).GidMap}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := checkpoint(t, tc.ns, tc.maps)
			if err := MapUserns(dir, dst); !errors.Is(err, ErrImages) {
				t.Fatalf("accepted: %v", err)
			}
		})
	}
	if err := MapUserns(t.TempDir(), IDMap{HostUID: 0, HostGID: 0, Size: 65536}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a map of host root: %v", err)
	}
}
