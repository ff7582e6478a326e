package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
)

// A mapped-ram state file's RAM section (QEMU 9.0+, migration/ram.c): the
// stream's "ram" section starts with the RAM's total size (flag
// RAM_SAVE_FLAG_MEM_SIZE), then for each RAM block its name (a length
// byte, the bytes), its used length (be64) and a MappedRamHeader (packed,
// big-endian: version u32, page size u64, bitmap offset u64, pages offset
// u64) that says where in the file the block's bitmap (one bit per page,
// host unsigned longs: little-endian 64-bit words here) and its pages are;
// the next block's name follows the block's page region. A page whose bit
// is clear is not in the file: the load leaves it as it finds it, which a
// fresh QEMU's RAM has as zero.

const (
	mappedRAMHdrVersion = 1
	mappedRAMHdrLen     = 28
	ramFlagMemSize      = 0x04
	// ramSectionScan bounds the search for the ram section's start (it
	// follows the stream header and the machine's configuration section).
	ramSectionScan = 64 << 10
)

// ErrNotMappedRAM is a state file that is not a mapped-ram file QEMU
// could load (or one this parser does not understand).
var ErrNotMappedRAM = errors.New("not a mapped-ram state file")

// RAMBlockMap is one RAM block of a mapped-ram state file.
type RAMBlockMap struct {
	// Name is the block's id (e.g. "pc.ram", or a memory backend's id).
	Name string
	// Length is the block's used length in bytes; PageSize its page.
	Length   int64
	PageSize int64
	// PagesOffset is where in the file its page 0 is.
	PagesOffset int64
	// bitmap holds a bit per page, set where the page is in the file.
	bitmap []uint64
}

// Present reports whether page i of the block is in the file.
func (b RAMBlockMap) Present(i int64) bool {
	return b.bitmap[i/64]&(1<<(i%64)) != 0
}

// Absent calls fn for each run of pages the file does not hold, as byte
// offsets within the block: [off, off+n), in order, each run maximal.
func (b RAMBlockMap) Absent(fn func(off, n int64) error) error {
	pages := b.Length / b.PageSize
	for i := int64(0); i < pages; {
		w := b.bitmap[i/64] >> (i % 64)
		if w&1 != 0 {
			// Skip the set bits from i on.
			i += int64(bits.TrailingZeros64(^w))
			continue
		}
		j := i
		for j < pages {
			w := b.bitmap[j/64] >> (j % 64)
			if w != 0 {
				j += int64(bits.TrailingZeros64(w))
				break
			}
			j += 64 - j%64
		}
		j = min(j, pages)
		if err := fn(i*b.PageSize, (j-i)*b.PageSize); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// ReadRAMBlockMaps reads the RAM blocks' layout and bitmaps from a
// mapped-ram state file.
func ReadRAMBlockMaps(path string) ([]RAMBlockMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ram bitmaps: %w", err)
	}
	defer f.Close()
	blocks, err := readRAMBlockMaps(f)
	if err != nil {
		return nil, fmt.Errorf("ram bitmaps of %s: %w", path, err)
	}
	return blocks, nil
}

func readRAMBlockMaps(f io.ReaderAt) ([]RAMBlockMap, error) {
	head := make([]byte, ramSectionScan)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:n]
	if len(head) < 8 || string(head[:4]) != "QEVM" {
		return nil, fmt.Errorf("%w: no QEVM magic", ErrNotMappedRAM)
	}
	pos, total, err := findRAMSection(head)
	if err != nil {
		return nil, err
	}
	var blocks []RAMBlockMap
	for sum := int64(0); sum < total; {
		b, next, err := readRAMBlock(f, pos)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
		sum += b.Length
		pos = next
	}
	return blocks, nil
}

// findRAMSection finds the ram section's start (QEMU_VM_SECTION_START,
// section id, "ram", instance 0, version 4) and returns the offset of
// its first block and the RAM's total size.
func findRAMSection(head []byte) (int64, int64, error) {
	marker := []byte{3, 'r', 'a', 'm', 0, 0, 0, 0, 0, 0, 0, 4}
	for off := 0; ; {
		i := bytes.Index(head[off:], marker)
		if i < 0 {
			return 0, 0, fmt.Errorf("%w: no ram section in its first %d bytes", ErrNotMappedRAM, len(head))
		}
		i += off
		end := i + len(marker)
		if i >= 5 && head[i-5] == 0x01 && end+8 <= len(head) {
			v := binary.BigEndian.Uint64(head[end:])
			if v&ramFlagMemSize != 0 {
				return int64(end + 8), int64(v &^ 0xfff), nil
			}
		}
		off = i + 1
	}
}

// readRAMBlock reads the block record at pos and its bitmap; next is
// where the following block's record starts.
func readRAMBlock(f io.ReaderAt, pos int64) (RAMBlockMap, int64, error) {
	var b RAMBlockMap
	rec := make([]byte, 1+255+8+mappedRAMHdrLen)
	n, err := f.ReadAt(rec, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return b, 0, err
	}
	rec = rec[:n]
	if len(rec) < 1 || len(rec) < 1+int(rec[0])+8+mappedRAMHdrLen {
		return b, 0, fmt.Errorf("%w: short ram block record at %d", ErrNotMappedRAM, pos)
	}
	l := int(rec[0])
	b.Name = string(rec[1 : 1+l])
	b.Length = int64(binary.BigEndian.Uint64(rec[1+l:]))
	h := rec[1+l+8:]
	version := binary.BigEndian.Uint32(h)
	b.PageSize = int64(binary.BigEndian.Uint64(h[4:]))
	bitmapOff := int64(binary.BigEndian.Uint64(h[12:]))
	b.PagesOffset = int64(binary.BigEndian.Uint64(h[20:]))
	hdrEnd := pos + int64(1+l+8+mappedRAMHdrLen)
	switch {
	case version == 0 || version > mappedRAMHdrVersion:
		return b, 0, fmt.Errorf("%w: block %q header version %d", ErrNotMappedRAM, b.Name, version)
	case b.PageSize <= 0 || b.PageSize&(b.PageSize-1) != 0 || b.Length%b.PageSize != 0 || b.Length <= 0:
		return b, 0, fmt.Errorf("%w: block %q of %d bytes, page %d", ErrNotMappedRAM, b.Name, b.Length, b.PageSize)
	case bitmapOff != hdrEnd:
		return b, 0, fmt.Errorf("%w: block %q bitmap at %d, header ends at %d", ErrNotMappedRAM, b.Name, bitmapOff, hdrEnd)
	}
	words := (b.Length/b.PageSize + 63) / 64
	if b.PagesOffset < bitmapOff+8*words {
		return b, 0, fmt.Errorf("%w: block %q pages at %d overlap its bitmap", ErrNotMappedRAM, b.Name, b.PagesOffset)
	}
	raw := make([]byte, 8*words)
	if _, err := f.ReadAt(raw, bitmapOff); err != nil {
		return b, 0, fmt.Errorf("%w: block %q bitmap: %w", ErrNotMappedRAM, b.Name, err)
	}
	b.bitmap = make([]uint64, words)
	for i := range b.bitmap {
		b.bitmap[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return b, b.PagesOffset + b.Length, nil
}
