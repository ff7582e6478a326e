package guest

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// cpioEntry is one member of a newc cpio archive.
type cpioEntry struct {
	name         string
	mode         uint32 // type and permission bits
	data         []byte
	major, minor uint32 // rdev, for device nodes
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFCHR = 0o020000
)

// WriteInitramfs writes an uncompressed newc cpio archive to path holding
// init (the memfill binary) as /init, /dev/console, /dev and /proc.
func WriteInitramfs(path, init string) error {
	data, err := os.ReadFile(init)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	entries := []cpioEntry{
		{name: "dev", mode: sIFDIR | 0o755},
		{name: "dev/console", mode: sIFCHR | 0o600, major: 5, minor: 1},
		{name: "proc", mode: sIFDIR | 0o755},
		{name: "init", mode: sIFREG | 0o755, data: data},
		{name: "TRAILER!!!"},
	}
	for i, e := range entries {
		if err := writeEntry(w, i+1, e); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeEntry writes one newc header, name and data, each padded to 4 bytes.
func writeEntry(w io.Writer, ino int, e cpioEntry) error {
	nlink := 1
	if e.mode&sIFDIR != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.major, e.minor, len(e.name)+1, 0)
	buf := append([]byte(hdr), e.name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if len(e.data) == 0 {
		return nil
	}
	if _, err := w.Write(e.data); err != nil {
		return err
	}
	_, err := w.Write(make([]byte, (4-len(e.data)%4)%4))
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
