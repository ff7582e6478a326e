package vm

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// The initramfs's layout, the contract with the guest's init
// (vessel-agent init):
//
//	/init                     the agent (PID 1 of the initramfs)
//	/lib/modules/NAME.ko      each module, decompressed
//	/lib/modules/vessel.load  the modules' paths (/lib/modules/NAME.ko), one a
//	                          line, in load order (finit_module each, flags 0)
//	/dev/console              the console device (5,1): the kernel opens it
//	                          as init's stdio before running /init
//	/bin, /dev, /proc, /sys, /run, /mnt/root   empty directories
const (
	InitPath     = "/init"
	ModulesDir   = "/lib/modules"
	LoadListPath = "/lib/modules/vessel.load"
)

// File is an extra file of the initramfs.
type File struct {
	Path string // absolute, its directory among the layout's
	Mode uint32 // permission bits
	Data []byte
}

// BuildInitramfs writes the initramfs (an uncompressed newc cpio archive,
// which the kernel unpacks without a decompressor) with init as /init, the
// modules, in load order, and any extra files.
func BuildInitramfs(w io.Writer, init []byte, mods []Module, extra ...File) error {
	cw := &cpioWriter{w: bufio.NewWriter(w), ino: 1}
	for _, d := range []string{"bin", "dev", "proc", "sys", "run", "mnt", "mnt/root", "lib", "lib/modules"} {
		cw.entry(d, modeDir|0o755, 0, 0, nil)
	}
	cw.entry("dev/console", modeChar|0o600, 5, 1, nil)
	cw.entry(strings.TrimPrefix(InitPath, "/"), modeFile|0o755, 0, 0, init)
	var load strings.Builder
	for _, m := range mods {
		p := path.Join(ModulesDir, m.File)
		cw.entry(strings.TrimPrefix(p, "/"), modeFile|0o644, 0, 0, m.Data)
		load.WriteString(p + "\n")
	}
	cw.entry(strings.TrimPrefix(LoadListPath, "/"), modeFile|0o644, 0, 0, []byte(load.String()))
	for _, f := range extra {
		cw.entry(strings.TrimPrefix(path.Clean(f.Path), "/"), modeFile|f.Mode&0o7777, 0, 0, f.Data)
	}
	cw.entry("TRAILER!!!", 0, 0, 0, nil)
	if cw.err != nil {
		return fmt.Errorf("write initramfs: %w", cw.err)
	}
	if err := cw.w.Flush(); err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	return nil
}

// File types of a cpio entry's mode.
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
)

// cpioWriter writes the "newc" format (SVR4 without checksums): a
// 110-byte ASCII header, the NUL-terminated name, the data, each padded
// to 4 bytes.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	off int64
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, rmaj, rmin uint32, data []byte) {
	if c.err != nil {
		return
	}
	nlink := 1
	if mode&modeDir != 0 {
		nlink = 2
	}
	ino := c.ino
	if name == "TRAILER!!!" {
		ino, nlink = 0, 1
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmaj, rmin, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}
