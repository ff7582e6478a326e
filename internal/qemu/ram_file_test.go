package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vesselhost/vessel/internal/qemu/qemutest"
)

// writeMappedRAM writes qemutest.MappedRAM(blocks) to path.
func writeMappedRAM(t *testing.T, path string, blocks []qemutest.Block) {
	t.Helper()
	if err := os.WriteFile(path, qemutest.MappedRAM(blocks), 0o600); err != nil {
		t.Fatal(err)
	}
}

type span struct{ off, n int64 }

func absentRuns(t *testing.T, b RAMBlockMap) []span {
	t.Helper()
	var out []span
	if err := b.Absent(func(off, n int64) error { out = append(out, span{off, n}); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadRAMBlockMaps: the blocks, their bitmaps and the runs of pages a
// file does not hold, across word boundaries and at a block's end.
func TestReadRAMBlockMaps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	writeMappedRAM(t, path, []qemutest.Block{
		{Name: "pc.ram", Pages: 200, Present: []int64{0, 1, 2, 63, 64, 65, 130, 199}},
		{Name: "/rom@etc/acpi/tables", Pages: 32, Present: nil},
		{Name: "vga.vram", Pages: 64, Present: seq(0, 64)},
	})
	blocks, err := ReadRAMBlockMaps(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range blocks {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"pc.ram", "/rom@etc/acpi/tables", "vga.vram"}) {
		t.Fatalf("blocks %q", names)
	}
	ram := blocks[0]
	if ram.Length != 200*4096 || ram.PageSize != 4096 || ram.PagesOffset%(1<<20) != 0 || !ram.Present(64) || ram.Present(3) {
		t.Errorf("pc.ram: %+v", ram)
	}
	want := []span{{3 * 4096, 60 * 4096}, {66 * 4096, 64 * 4096}, {131 * 4096, 68 * 4096}}
	if got := absentRuns(t, ram); !slices.Equal(got, want) {
		t.Errorf("pc.ram absent %v, want %v", got, want)
	}
	if got := absentRuns(t, blocks[1]); !slices.Equal(got, []span{{0, 32 * 4096}}) {
		t.Errorf("empty block absent %v", got)
	}
	if got := absentRuns(t, blocks[2]); len(got) != 0 {
		t.Errorf("full block absent %v", got)
	}
}

func seq(from, to int64) []int64 {
	var s []int64
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestReadRAMBlockMapsRefuses: a stream file, or one whose header does
// not add up, is not taken for a mapped-ram file.
func TestReadRAMBlockMapsRefuses(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "stream")
	if err := os.WriteFile(stream, []byte("QEVM\x00\x00\x00\x03\x01\x00\x00\x00\x02\x03ram\x00\x00\x00\x00\x00\x00\x00\x04"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRAMBlockMaps(stream); !errors.Is(err, ErrNotMappedRAM) {
		t.Errorf("truncated: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	writeMappedRAM(t, bad, []qemutest.Block{{Name: "pc.ram", Pages: 8}})
	b, _ := os.ReadFile(bad)
	i := bytes.Index(b, []byte("\x06pc.ram")) + 7 + 8
	binary.BigEndian.PutUint64(b[i+12:], 12345) // bitmap offset
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRAMBlockMaps(bad); !errors.Is(err, ErrNotMappedRAM) {
		t.Errorf("bad bitmap offset: %v", err)
	}
}

// TestPrepareRAMFile: the pages the state does not hold read as zero
// afterwards, the others keep what they had (the load overwrites them);
// a RAM file of another size is removed, a missing one is no error.
func TestPrepareRAMFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "vm.state")
	writeMappedRAM(t, state, []qemutest.Block{{Name: "pc.ram", Pages: 100, Present: append(seq(0, 10), 50, 99)}})
	ramFile := filepath.Join(dir, "vm.ram")
	if _, err := PrepareRAMFile(ramFile, state, "pc.ram"); err != nil {
		t.Fatalf("missing ram file: %v", err)
	}
	stale := bytes.Repeat([]byte{0xa5}, 100*4096)
	if err := os.WriteFile(ramFile, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := PrepareRAMFile(ramFile, state, "pc.ram")
	if err != nil {
		t.Fatal(err)
	}
	if st.Punched != 88*4096 || st.Kept < 100*4096 {
		t.Errorf("stats %+v", st)
	}
	got, err := os.ReadFile(ramFile)
	if err != nil || len(got) != len(stale) {
		t.Fatalf("ram file: %d bytes, %v", len(got), err)
	}
	for p := range int64(100) {
		pg := got[p*4096 : (p+1)*4096]
		held := p < 10 || p == 50 || p == 99
		if held && !bytes.Equal(pg, stale[:4096]) || !held && !bytes.Equal(pg, make([]byte, 4096)) {
			t.Errorf("page %d (held %v) starts %x", p, held, pg[:8])
		}
	}
	if err := os.WriteFile(ramFile, stale[:4096], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareRAMFile(ramFile, state, "pc.ram"); err == nil {
		t.Error("a ram file of another size was kept")
	}
	if _, err := os.Stat(ramFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ram file of another size still there: %v", err)
	}
	if err := os.WriteFile(ramFile, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareRAMFile(ramFile, state, "microvm.ram"); err == nil {
		t.Error("kept for a block the state lacks")
	}
	if _, err := os.Stat(ramFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ram file still there: %v", err)
	}
}
