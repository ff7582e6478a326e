// Package qemutest builds QEMU state files for tests that do not run QEMU.
package qemutest

import (
	"bytes"
	"encoding/binary"
)

// PageSize is the page of the blocks MappedRAM lays out.
const PageSize = 4096

// Block is one RAM block of a MappedRAM file: Present lists the pages the
// file holds (their bit set in the block's bitmap).
type Block struct {
	Name    string
	Pages   int64
	Present []int64
}

// MappedRAM returns a mapped-ram state file laid out as QEMU 10 writes
// one: the stream header, a configuration section, the ram section's
// setup (total size | RAM_SAVE_FLAG_MEM_SIZE; per block its name, used
// length and MappedRamHeader, the bitmap at the header's end, the pages
// 1 MiB-aligned after it, zero), then an end of stream.
func MappedRAM(blocks []Block) []byte {
	var buf bytes.Buffer
	be := func(v any) { _ = binary.Write(&buf, binary.BigEndian, v) }
	buf.WriteString("QEVM")
	be(uint32(3))
	buf.Write([]byte{0x07, 11})
	buf.WriteString("pc-q35-10.0")
	be(uint32(0))
	var total int64
	for _, b := range blocks {
		total += b.Pages * PageSize
	}
	buf.WriteByte(0x01) // QEMU_VM_SECTION_START
	be(uint32(2))
	buf.Write([]byte{3, 'r', 'a', 'm'})
	be(uint32(0)) // instance
	be(uint32(4)) // version
	be(uint64(total) | 0x04)
	for _, b := range blocks {
		buf.WriteByte(byte(len(b.Name)))
		buf.WriteString(b.Name)
		be(uint64(b.Pages * PageSize))
		bitmapOff := int64(buf.Len()) + 28
		words := (b.Pages + 63) / 64
		pagesOff := (bitmapOff + 8*words + 1<<20 - 1) &^ (1<<20 - 1)
		be(uint32(1))
		be(uint64(PageSize))
		be(uint64(bitmapOff))
		be(uint64(pagesOff))
		bitmap := make([]uint64, words)
		for _, p := range b.Present {
			bitmap[p/64] |= 1 << (p % 64)
		}
		for _, w := range bitmap {
			_ = binary.Write(&buf, binary.LittleEndian, w)
		}
		buf.Write(make([]byte, pagesOff+b.Pages*PageSize-int64(buf.Len())))
	}
	buf.WriteByte(0x10) // QEMU_VM_EOF
	return buf.Bytes()
}
