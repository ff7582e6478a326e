package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/magic"

	"github.com/vesselhost/vessel/internal/testutil"
)

func u32(v uint32) *uint32 { return &v }

func ext(first, lower, count uint32) *userns.UidGidExtent {
	return &userns.UidGidExtent{First: u32(first), LowerFirst: u32(lower), Count: u32(count)}
}

// checkpoint writes the images CheckUserns reads: the dumping CRIU in
// user namespace 1, tasks in taskNS, and one userns image per map.
func checkpoint(t *testing.T, taskNS []uint32, maps map[uint32]*userns.UsernsEntry) string {
	dir := t.TempDir()
	testutil.WriteCRIUImage(t, filepath.Join(dir, "inventory.img"), "INVENTORY",
		&inventory.InventoryEntry{ImgVersion: u32(2), RootIds: &criucore.TaskKobjIdsEntry{UserNsId: u32(1)}})
	for i, ns := range taskNS {
		testutil.WriteCRIUImage(t, filepath.Join(dir, fmt.Sprintf("ids-%d.img", i+1)), "IDS", &criucore.TaskKobjIdsEntry{UserNsId: u32(ns)})
	}
	for id, e := range maps {
		testutil.WriteCRIUImage(t, filepath.Join(dir, fmt.Sprintf("userns-%d.img", id)), "USERNS", e)
	}
	return dir
}

func TestCheckUserns(t *testing.T) {
	m := IDMap{HostUID: 1000000, HostGID: 2000000, Size: 65536}
	good := &userns.UsernsEntry{UidMap: []*userns.UidGidExtent{ext(0, 1000000, 65536)}, GidMap: []*userns.UidGidExtent{ext(0, 2000000, 65536)}}
	for _, tc := range []struct {
		name string
		ns   []uint32
		maps map[uint32]*userns.UsernsEntry
		ok   bool
	}{
		{"this container's namespace", []uint32{14, 14}, map[uint32]*userns.UsernsEntry{14: good}, true},
		{"no user namespace (host root)", []uint32{1}, nil, false},
		{"a task left in the host's", []uint32{14, 1}, map[uint32]*userns.UsernsEntry{14: good}, false},
		{"two namespaces", []uint32{14, 15}, map[uint32]*userns.UsernsEntry{14: good, 15: good}, false},
		{"maps host root", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(0, 0, 65536)}, GidMap: []*userns.UidGidExtent{ext(0, 2000000, 65536)}}}, false},
		{"an extra extent", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(0, 1000000, 65536), ext(65536, 0, 1)}, GidMap: good.GidMap}}, false},
		{"another container's range", []uint32{14}, map[uint32]*userns.UsernsEntry{14: {
			UidMap: []*userns.UidGidExtent{ext(0, 1065536, 65536)}, GidMap: good.GidMap}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckUserns(checkpoint(t, tc.ns, tc.maps), m)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && !errors.Is(err, ErrImages) {
				t.Fatalf("accepted: %v", err)
			}
		})
	}
}

func TestCheckUsernsBoundsEntries(t *testing.T) {
	dir := t.TempDir()
	mm := magic.LoadMagic()
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(mm.ByName["IMG_COMMON"]))
	b = binary.LittleEndian.AppendUint32(b, uint32(mm.ByName["INVENTORY"]))
	b = binary.LittleEndian.AppendUint32(b, 1<<31) // a 2 GiB entry: not allocated
	if err := os.WriteFile(filepath.Join(dir, "inventory.img"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckUserns(dir, IDMap{HostUID: 1, HostGID: 1, Size: 1}); !errors.Is(err, ErrImages) {
		t.Fatalf("err = %v", err)
	}
}
