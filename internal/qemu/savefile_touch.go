package qemu

// Touching the first page of each read of a mapped-ram load.
//
// btrfs (kernel 6.18 here) serves an O_DIRECT read with page faults
// disabled: it pins the destination's pages without faulting, and when
// that makes some progress it faults the rest of the range in itself and
// goes on direct; when the very first page of the read is not present it
// makes none, and the whole read is served through the page cache
// (/work/vmload3-res/dioprobe: 1 MiB reads into fresh anonymous memory,
// 768 of 768 MiB cached; with only the first page of each read written
// first, 0). A fresh QEMU's guest RAM has no page present, so a load that
// populates nothing reads all of it buffered (charged to the VM's memory
// cgroup beside the RAM it fills); populating all of it first
// (preallocRAM) keeps the reads direct but runs every fault before the
// first read: half of an 8 GiB load here.
//
// So a load writes one byte into the first page of each read QEMU's
// loader will make (touchReads), found from the file itself: QEMU 10's
// read_ramblock_mapped_ram reads each run of set bits of a RAM block's
// bitmap in pieces of MAPPED_RAM_LOAD_BUF_SIZE (1 MiB) from the run's
// start. The rest of each read's pages are faulted in by the read, in the
// multifd channel that makes it, beside the other channels' I/O, and only
// the pages the file holds are allocated. The bytes are written with
// process_vm_writev before migrate-incoming (QEMU does not touch guest RAM
// until then) into pages the load then overwrites whole.
//
// The layout read here (migration/ram.c, mapped-ram): the "ram" section's
// setup record is the total RAM size with RAM_SAVE_FLAG_MEM_SIZE, then per
// RAM block its idstr (length byte, bytes), used length (be64) and a
// MappedRamHeader (be32 version, be64 page size, be64 bitmap offset, be64
// pages offset: absolute file offsets); the stream goes on past the
// block's page region (pages offset + used length). The bitmap is host
// unsigned longs (little-endian here), bit i the block's page i.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mappedRAMReadSize is QEMU's MAPPED_RAM_LOAD_BUF_SIZE: the largest read
// its loader makes of one run of pages.
const mappedRAMReadSize = 1 << 20

// errLayout is a state file whose mapped-ram layout touchReads does not
// know: the load populates all RAM first instead.
var errLayout = errors.New("mapped-ram layout not understood")

// ramBlockReads is where QEMU's loader will start reading one RAM block:
// byte offsets into the block.
type ramBlockReads struct {
	Name   string
	Used   int64
	Starts []int64
}

// ramSectionMagic is the start of the "ram" section's setup record
// (QEMU_VM_SECTION_START, a 4-byte section id, then this) with instance 0
// and version 4.
var ramSectionMagic = []byte("\x03ram\x00\x00\x00\x00\x00\x00\x00\x04")

// mappedRAMReads reads a mapped-ram state file's RAM blocks and where the
// loader's reads of each will start.
func mappedRAMReads(path string) ([]ramBlockReads, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("QEVM")) {
		return nil, fmt.Errorf("%w: not a migration stream", errLayout)
	}
	i := bytes.Index(head, ramSectionMagic)
	if i < 5 || head[i-5] != 0x01 {
		return nil, fmt.Errorf("%w: no ram section", errLayout)
	}
	r := &offsetReader{f: f, off: int64(i + len(ramSectionMagic))}
	total := r.be64()
	if total&0xfff != 0x04 { // RAM_SAVE_FLAG_MEM_SIZE
		return nil, fmt.Errorf("%w: ram setup flags %#x", errLayout, total&0xfff)
	}
	total &^= 0xfff
	var out []ramBlockReads
	for sum := int64(0); sum < int64(total); {
		name := r.str()
		used := int64(r.be64())
		version, pageSize := r.be32(), r.be64()
		bitmapOff, pagesOff := int64(r.be64()), int64(r.be64())
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", errLayout, r.err)
		}
		if version != 1 || pageSize != 4096 || used <= 0 || used%4096 != 0 || pagesOff%mappedRAMReadSize != 0 || bitmapOff >= pagesOff {
			return nil, fmt.Errorf("%w: block %q: version %d, page size %d, used %d, bitmap at %d, pages at %d",
				errLayout, name, version, pageSize, used, bitmapOff, pagesOff)
		}
		pages := used / 4096
		bitmap := make([]byte, (pages+63)/64*8)
		if _, err := f.ReadAt(bitmap, bitmapOff); err != nil {
			return nil, fmt.Errorf("%w: bitmap of %q: %v", errLayout, name, err)
		}
		out = append(out, ramBlockReads{Name: name, Used: used, Starts: readStarts(bitmap, pages)})
		sum += used
		r.off = pagesOff + used
	}
	return out, nil
}

// readStarts is where QEMU's loader starts its reads of a block whose
// bitmap (little-endian longs) marks which of its pages the file holds:
// each run of set bits, in pieces of mappedRAMReadSize from its start.
func readStarts(bitmap []byte, pages int64) []int64 {
	set := func(p int64) bool { return bitmap[p/8]&(1<<(p%8)) != 0 }
	var starts []int64
	for p := int64(0); p < pages; {
		if !set(p) {
			p++
			continue
		}
		end := p
		for end < pages && set(end) {
			end++
		}
		for s := p; s < end; s += mappedRAMReadSize / 4096 {
			starts = append(starts, s*4096)
		}
		p = end
	}
	return starts
}

// offsetReader reads big-endian fields at a moving offset; the first
// error sticks.
type offsetReader struct {
	f   *os.File
	off int64
	err error
}

func (r *offsetReader) read(n int) []byte {
	b := make([]byte, n)
	if r.err != nil {
		return b
	}
	_, r.err = r.f.ReadAt(b, r.off)
	r.off += int64(n)
	return b
}

func (r *offsetReader) be32() uint32 { return binary.BigEndian.Uint32(r.read(4)) }
func (r *offsetReader) be64() uint64 { return binary.BigEndian.Uint64(r.read(8)) }
func (r *offsetReader) str() string  { return string(r.read(int(r.read(1)[0]))) }

// ramBlockHosts reads where QEMU maps each writable RAM block in its
// address space (x-query-ramblock's HVA column).
func ramBlockHosts(mon Runner) (map[string]uint64, error) {
	var out struct {
		Text string `json:"human-readable-text"`
	}
	if err := run(mon, "x-query-ramblock", nil, &out); err != nil {
		return nil, err
	}
	return parseRAMBlocks(out.Text)
}

// parseRAMBlocks parses x-query-ramblock's table: "Block Name  PSize
// Offset Used Total HVA RO" (PSize is two words, "4 KiB").
func parseRAMBlocks(text string) (map[string]uint64, error) {
	hosts := map[string]uint64{}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) == 0 || !strings.Contains(lines[0], "HVA") {
		return nil, fmt.Errorf("%w: x-query-ramblock: no HVA column", errLayout)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 7 {
			return nil, fmt.Errorf("%w: x-query-ramblock line %q", errLayout, l)
		}
		if f[len(f)-1] != "rw" {
			continue
		}
		hva, err := strconv.ParseUint(strings.TrimPrefix(f[len(f)-2], "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: x-query-ramblock line %q: %v", errLayout, l, err)
		}
		hosts[f[0]] = hva
	}
	return hosts, nil
}

// touchBatch is the remote iovecs per process_vm_writev (IOV_MAX).
const touchBatch = 1024

// touchReads writes a zero byte into process pid's memory at the first
// page of each read (blocks' Starts, from the host addresses hosts), so
// that each read finds its first page present; blocks QEMU does not list
// as writable are left alone. It returns the pages touched.
func touchReads(pid int, hosts map[string]uint64, blocks []ramBlockReads) (int, error) {
	var addrs []uint64
	for _, b := range blocks {
		hva, ok := hosts[b.Name]
		if !ok {
			continue
		}
		for _, s := range b.Starts {
			addrs = append(addrs, hva+uint64(s))
		}
	}
	total := len(addrs)
	zero := make([]byte, touchBatch)
	remote := make([]unix.RemoteIovec, 0, touchBatch)
	for len(addrs) > 0 {
		n := min(len(addrs), touchBatch)
		remote = remote[:0]
		for _, a := range addrs[:n] {
			remote = append(remote, unix.RemoteIovec{Base: uintptr(a), Len: 1})
		}
		local := []unix.Iovec{{Base: &zero[0]}}
		local[0].SetLen(n)
		w, err := unix.ProcessVMWritev(pid, local, remote, 0)
		if err != nil {
			return 0, fmt.Errorf("touch the RAM of pid %d: %w", pid, err)
		}
		if w != n {
			return 0, fmt.Errorf("touch the RAM of pid %d: %d of %d pages", pid, w, n)
		}
		addrs = addrs[n:]
	}
	return total, nil
}

// touchLoad prepares a mapped-ram load of path by the QEMU pid serves
// mon: the first page of each of its reads touched (touchReads). It
// returns the pages touched; errLayout when the file or QEMU's RAM
// listing is not what it knows.
func touchLoad(mon Runner, pid int, path string) (int, error) {
	blocks, err := mappedRAMReads(path)
	if err != nil {
		return 0, err
	}
	hosts, err := ramBlockHosts(mon)
	if err != nil {
		return 0, err
	}
	return touchReads(pid, hosts, blocks)
}
