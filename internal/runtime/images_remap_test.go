package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/utsns"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/testutil"
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

// TestSetUTSName: a checkpoint's UTS namespace takes the new nodename and
// keeps its domain name; a name that is right already is not rewritten;
// images without a UTS namespace are left, two are refused.
func TestSetUTSName(t *testing.T) {
	write := func(t *testing.T, dir string, id int, node, domain string) string {
		p := filepath.Join(dir, "utsns-"+strconv.Itoa(id)+".img")
		testutil.WriteCRIUImage(t, p, "UTSNS", &utsns.UtsnsEntry{Nodename: proto.String(node), Domainname: proto.String(domain)})
		return p
	}
	read := func(t *testing.T, p string) *utsns.UtsnsEntry {
		var ue utsns.UtsnsEntry
		if err := readImage(p, &ue, nil); err != nil {
			t.Fatal(err)
		}
		return &ue
	}
	t.Run("renamed, domain kept", func(t *testing.T) {
		dir := t.TempDir()
		p := write(t, dir, 12, "web1", "example")
		if err := SetUTSName(dir, "web2"); err != nil {
			t.Fatal(err)
		}
		if ue := read(t, p); ue.GetNodename() != "web2" || ue.GetDomainname() != "example" {
			t.Fatalf("after: %v", ue)
		}
	})
	t.Run("the right name is left alone", func(t *testing.T) {
		dir := t.TempDir()
		p := write(t, dir, 12, "web2", "(none)")
		before, _ := os.Stat(p)
		if err := SetUTSName(dir, "web2"); err != nil {
			t.Fatal(err)
		}
		if after, _ := os.Stat(p); !os.SameFile(before, after) {
			t.Fatal("rewrote an image that was right")
		}
	})
	t.Run("no UTS namespace", func(t *testing.T) {
		if err := SetUTSName(t.TempDir(), "web2"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("two are refused", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, 12, "web1", "")
		write(t, dir, 13, "web1", "")
		if err := SetUTSName(dir, "web2"); !errors.Is(err, ErrImages) {
			t.Fatalf("accepted: %v", err)
		}
	})
	t.Run("a damaged image is refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "utsns-12.img"), []byte{1, 2}, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := SetUTSName(dir, "web2"); !errors.Is(err, ErrImages) {
			t.Fatalf("accepted: %v", err)
		}
	})
}
