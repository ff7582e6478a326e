package qemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The bitmap of a block of 1024 pages with runs [3, 5) and [300, 1000):
// the second run is longer than one read (256 pages).
func testBitmap() []byte {
	b := make([]byte, 1024/8)
	for _, r := range [][2]int{{3, 5}, {300, 1000}} {
		for p := r[0]; p < r[1]; p++ {
			b[p/8] |= 1 << (p % 8)
		}
	}
	return b
}

func TestReadStarts(t *testing.T) {
	got := readStarts(testBitmap(), 1024)
	want := []int64{3 * 4096, 300 * 4096, 556 * 4096, 812 * 4096}
	if !slices.Equal(got, want) {
		t.Errorf("starts %v, want %v", got, want)
	}
	if got := readStarts(make([]byte, 8), 64); len(got) != 0 {
		t.Errorf("an empty bitmap: starts %v", got)
	}
}

// writeMappedRAM writes a state file laid out as QEMU 10's mapped-ram
// save lays it out: a header and configuration section, the ram section's
// setup record, and per block its idstr, used length, MappedRamHeader and
// (after it) bitmap, its pages region at a 1 MiB-aligned offset, the next
// block's record after that region.
func writeMappedRAM(t *testing.T, path string, blocks map[string][]byte, order []string, pages map[string]int64) {
	t.Helper()
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	be64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	for _, n := range order {
		total += pages[n] * 4096
	}
	head := append([]byte("QEVM\x00\x00\x00\x03\x07\x00\x00\x00\x0bpc-q35-10.0"), 0x01)
	head = append(head, be32(1)...)
	head = append(head, ramSectionMagic...)
	head = append(head, be64(uint64(total)|0x04)...)
	off := int64(0)
	write := func(b []byte) {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
	}
	write(head)
	for _, n := range order {
		used := pages[n] * 4096
		rec := append([]byte{byte(len(n))}, n...)
		rec = append(rec, be64(uint64(used))...)
		bitmapOff := off + int64(len(rec)) + 28
		pagesOff := (bitmapOff + int64(len(blocks[n])) + 1<<20) &^ (1<<20 - 1)
		rec = append(rec, be32(1)...)
		rec = append(rec, be64(4096)...)
		rec = append(rec, be64(uint64(bitmapOff))...)
		rec = append(rec, be64(uint64(pagesOff))...)
		write(rec)
		write(blocks[n])
		off = pagesOff + used
	}
	write([]byte{0x06}) // the stream goes on (QEMU_VM_SECTION_FOOTER...)
}

func TestMappedRAMReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	small := make([]byte, 8) // 64 pages, all set: one read
	for i := range small {
		small[i] = 0xff
	}
	writeMappedRAM(t, path, map[string][]byte{"pc.ram": testBitmap(), "pc.bios": small},
		[]string{"pc.ram", "pc.bios"}, map[string]int64{"pc.ram": 1024, "pc.bios": 64})
	got, err := mappedRAMReads(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "pc.ram" || got[0].Used != 1024*4096 || got[1].Name != "pc.bios" {
		t.Fatalf("blocks %+v", got)
	}
	if want := readStarts(testBitmap(), 1024); !slices.Equal(got[0].Starts, want) {
		t.Errorf("pc.ram starts %v, want %v", got[0].Starts, want)
	}
	if !slices.Equal(got[1].Starts, []int64{0}) {
		t.Errorf("pc.bios starts %v", got[1].Starts)
	}
	// Not a mapped-ram file QEMU 10 wrote: errLayout, and the load
	// populates all RAM instead.
	for name, b := range map[string][]byte{"stream": []byte("QEVM\x00\x00\x00\x03nothing"), "other": []byte("xxxx")} {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := mappedRAMReads(p); !errors.Is(err, errLayout) {
			t.Errorf("%s: %v, want errLayout", name, err)
		}
	}
}

// What QEMU 10.0's x-query-ramblock says of a q35 machine.
const ramblockText = `              Block Name    PSize              Offset               Used              Total                HVA  RO
                  pc.ram    4 KiB  0x0000000000000000 0x0000000010000000 0x0000000010000000 0x00007f8ac7e00000  rw
    /rom@etc/acpi/tables    4 KiB  0x0000000010080000 0x0000000000020000 0x0000000000200000 0x00007f8b25600000  ro
                 pc.bios    4 KiB  0x0000000010000000 0x0000000000040000 0x0000000000040000 0x00007f8b25c00000  ro
`

func TestParseRAMBlocks(t *testing.T) {
	got, err := parseRAMBlocks(ramblockText)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["pc.ram"] != 0x7f8ac7e00000 {
		t.Errorf("hosts %#v, want only pc.ram (the read-only blocks left alone)", got)
	}
	if _, err := parseRAMBlocks("Block Name PSize\n"); !errors.Is(err, errLayout) {
		t.Errorf("no HVA column: %v", err)
	}
}

// resident says which of m's pages are in memory.
func resident(t *testing.T, m []byte) []bool {
	vec := make([]byte, len(m)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out
}

// touchTarget maps 1024 fresh pages of this process, as a fresh QEMU's
// RAM, and a state file whose pc.ram has testBitmap's runs.
func touchTarget(t *testing.T) (mem []byte, path string) {
	mem, err := unix.Mmap(-1, 0, 1024*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	path = filepath.Join(t.TempDir(), "vm.state")
	writeMappedRAM(t, path, map[string][]byte{"pc.ram": testBitmap()}, []string{"pc.ram"}, map[string]int64{"pc.ram": 1024})
	return mem, path
}

func TestTouchReads(t *testing.T) {
	mem, path := touchTarget(t)
	blocks, err := mappedRAMReads(path)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]uint64{"pc.ram": uint64(uintptr(unsafe.Pointer(&mem[0])))}
	n, err := touchReads(os.Getpid(), hosts, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d pages touched, want 4", n)
	}
	var got []int
	for p, in := range resident(t, mem) {
		if in {
			got = append(got, p)
		}
	}
	if want := []int{3, 300, 556, 812}; !slices.Equal(got, want) {
		t.Errorf("resident pages %v, want the reads' first pages %v", got, want)
	}
}

// A load given the pid touches the reads' first pages and populates
// nothing else (no qom-set prealloc); without a listing of QEMU's RAM
// blocks it falls back to populating all of it.
func TestLoadTouches(t *testing.T) {
	mem, path := touchTarget(t)
	text := fmt.Sprintf("Block Name PSize Offset Used Total HVA RO\npc.ram 4 KiB 0x0 0x400000 0x400000 %#x rw\n", uintptr(unsafe.Pointer(&mem[0])))
	mon := &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}, ramblocks: text}
	st, err := Load(context.Background(), mon, path, SaveOptions{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Touched != 4 || st.TouchErr != nil {
		t.Errorf("touched %d (%v), want 4", st.Touched, st.TouchErr)
	}
	if _, ok := mon.find("qom-set"); ok {
		t.Error("a load that touched the reads' pages populated all RAM too")
	}
	if n := mon.names(); slices.Index(n, "x-query-ramblock") > slices.Index(n, "migrate-incoming") {
		t.Errorf("touched after migrate-incoming: %v", n)
	}
	mon = &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}}
	st, err = Load(context.Background(), mon, path, SaveOptions{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("qom-set"); !ok || st.Touched != 0 || st.TouchErr == nil {
		t.Errorf("no RAM listing: touched %d (%v), populated %v; want the whole populate", st.Touched, st.TouchErr, ok)
	}
	mon = &fakeMonitor{t: t, status: "inmigrate", migrate: []string{"completed"}, ramblocks: text}
	if _, err := Load(context.Background(), mon, path, SaveOptions{PID: os.Getpid(), FullPrealloc: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mon.find("qom-set"); !ok {
		t.Error("FullPrealloc did not populate all RAM")
	}
}
