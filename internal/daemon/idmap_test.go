package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vesselhost/vessel/internal/state"
)

func TestReadSubids(t *testing.T) {
	p := filepath.Join(t.TempDir(), "subuid")
	content := "# comment\nalice:100000:65536\nroot:1000000:1000000000\nroot:0:65536\nroot:x:1\nroot:4294967000:65536\nroot:5000000:131072\n"
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readSubids(p, "root")
	if err != nil {
		t.Fatal(err)
	}
	// Host root (start 0), malformed and wrapping ranges are ignored.
	want := []idRange{{1000000, 1000000000}, {5000000, 131072}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if none, err := readSubids(filepath.Join(t.TempDir(), "missing"), "root"); err != nil || none != nil {
		t.Fatalf("missing file: %v %v", none, err)
	}
}

func TestAllocIDMap(t *testing.T) {
	rs := []idRange{{1000000, 4 * idmapSize}}
	first := func(int) int { return 0 }
	m, err := allocIDMap(rs, rs, nil, first)
	if err != nil || m != (state.IDMap{UID: 1048576, GID: 1048576, Size: idmapSize}) {
		// 1000000 is not block-aligned: the first whole block starts at 16*65536.
		t.Fatalf("first: %+v %v", m, err)
	}
	used := []state.IDMap{m}
	m2, err := allocIDMap(rs, rs, used, first)
	if err != nil || overlaps(m, m2) {
		t.Fatalf("second overlaps the first: %+v %+v %v", m, m2, err)
	}
	used = append(used, m2, state.IDMap{UID: m2.UID + idmapSize, GID: m2.GID + idmapSize, Size: idmapSize})
	if _, err := allocIDMap(rs, rs, used, first); !errors.Is(err, ErrConflict) {
		t.Fatalf("full: %v", err)
	}
	if _, err := allocIDMap(nil, rs, nil, first); !errors.Is(err, ErrConflict) {
		t.Fatalf("no ranges: %v", err)
	}
	// A random pick lands on any free block, never a used one.
	for i := range 3 {
		m, err := allocIDMap(rs, rs, used[:1], func(n int) int { return i % n })
		if err != nil || overlaps(m, used[0]) {
			t.Fatalf("pick %d: %+v %v", i, m, err)
		}
	}
}

func TestAdmitPeerInstance(t *testing.T) {
	td := newTestDaemon(t)
	d := td.Daemon
	idm := &state.IDMap{UID: 1000000, GID: 1000000, Size: idmapSize}
	priv := state.Instance{Name: "p", Config: map[string]string{KeyPrivileged: "true"}}
	if err := d.admitPeerInstance(&priv, true); !errors.Is(err, ErrForbidden) {
		t.Fatalf("privileged container from a peer: %v", err)
	}
	d.cfg.AcceptPrivileged = true
	if err := d.admitPeerInstance(&priv, true); err != nil {
		t.Fatalf("privileged, accepted by config: %v", err)
	}
	cold := state.Instance{Name: "c", IDMap: idm}
	if err := d.admitPeerInstance(&cold, false); err != nil || cold.IDMap != nil {
		t.Fatalf("cold move keeps the peer's map: %+v %v", cold.IDMap, err)
	}
	live := state.Instance{Name: "l"}
	if err := d.admitPeerInstance(&live, true); !errors.Is(err, ErrInvalid) {
		t.Fatalf("live move without a map: %v", err)
	}
	// The test daemon's subordinate ids are 1000000+655360.
	for _, tc := range []struct {
		m    state.IDMap
		want error
	}{
		{state.IDMap{UID: 1048576, GID: 1048576, Size: idmapSize}, nil},
		{state.IDMap{UID: 0, GID: 0, Size: idmapSize}, ErrForbidden},
		{state.IDMap{UID: 1048576, GID: 0, Size: idmapSize}, ErrForbidden},
		{state.IDMap{UID: 1048576, GID: 1048576, Size: 1 << 20}, ErrInvalid},
	} {
		if err := d.checkPeerIDMap("x", &tc.m); (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%+v: %v, want %v", tc.m, err, tc.want)
		}
	}
}
