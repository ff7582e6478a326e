package storage

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// A send stream comes from a peer host and is not trusted. btrfs receive
// runs jailed (btrfs_receive_jail.go), and in front of it sendChecker
// passes the stream on one whole command at a time, and only commands
// whose paths stay inside the subvolume being received:
//
//   - every path attribute (PATH, PATH_TO, CLONE_PATH, and PATH_LINK of a
//     hard link) is relative, without "." or ".." elements or empty ones;
//     a symlink's target (PATH_LINK of SYMLINK) is data and may be anything
//     (btrfs receive never follows it outside its chroot);
//   - the subvolume is created once, by the stream's first command (a
//     second SUBVOL or SNAPSHOT would make a second subvolume);
//   - a command's attributes fit in sendMaxCmd (btrfs send writes at most
//     64 KiB plus a header per command in protocol version 1).
//
// CLONE_PATH matters most: btrfs receive opens it relative to the pool's
// root, not to its chroot, so ".." there would reach any file of the pool.
// A violation ends the stream with an error wrapping ErrTransferFormat
// before btrfs receive sees any byte of the offending command.

// Send stream commands and attributes the checker looks at (btrfs-progs
// send.h, protocol version 1).
const (
	sendCmdSymlink  = 8
	sendCmdLink     = 10
	sendAttrPathTo  = 16
	sendAttrLink    = 17
	sendAttrClone   = 22
	sendMaxCmd      = 1 << 20
	sendCmdLastV1   = 22 // BTRFS_SEND_C_UPDATE_EXTENT
	sendAttrLastV1  = 24 // BTRFS_SEND_A_CLONE_LEN
	sendAttrHdrSize = 4
)

// sendChecker reads a send stream's commands after the first (see
// readSendHead) from r, checks each, and hands it on whole.
type sendChecker struct {
	r   io.Reader
	buf []byte // the checked command being handed on
	off int
	err error // sticky
	n   int   // commands checked
}

// newSendChecker checks the commands read from r (positioned after the
// stream header and first command).
func newSendChecker(r io.Reader) *sendChecker { return &sendChecker{r: r} }

// Read implements io.Reader.
func (c *sendChecker) Read(p []byte) (int, error) {
	for c.off == len(c.buf) {
		if c.err != nil {
			return 0, c.err
		}
		c.err = c.next()
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// next reads and checks the next command into buf; io.EOF at a command
// boundary is the stream's end.
func (c *sendChecker) next() error {
	hdr := make([]byte, sendCmdHeaderLen)
	if _, err := io.ReadFull(c.r, hdr); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("btrfs send stream cut inside command %d: %w", c.n+2, ErrTransferFormat)
	}
	size := binary.LittleEndian.Uint32(hdr)
	cmd := binary.LittleEndian.Uint16(hdr[4:])
	if size > sendMaxCmd {
		return fmt.Errorf("btrfs send stream command %d is %d bytes long: %w", cmd, size, ErrTransferFormat)
	}
	c.buf = append(c.buf[:0], hdr...)
	c.buf = append(c.buf, make([]byte, size)...)
	c.off = 0
	if _, err := io.ReadFull(c.r, c.buf[sendCmdHeaderLen:]); err != nil {
		return fmt.Errorf("btrfs send stream cut inside command %d: %w", c.n+2, ErrTransferFormat)
	}
	c.n++
	if err := checkSendCmd(cmd, c.buf[sendCmdHeaderLen:]); err != nil {
		c.buf = c.buf[:0]
		return fmt.Errorf("btrfs send stream command %d (type %d) refused: %w: %w", c.n+1, cmd, err, ErrTransferFormat)
	}
	return nil
}

// checkSendCmd checks one command (not the first) and its attributes.
func checkSendCmd(cmd uint16, attrs []byte) error {
	switch {
	case cmd == sendCmdSubvol || cmd == sendCmdSnapshot:
		return fmt.Errorf("a second subvolume in one stream")
	case cmd == 0 || cmd > sendCmdLastV1:
		return fmt.Errorf("unknown command")
	}
	for len(attrs) > 0 {
		if len(attrs) < sendAttrHdrSize {
			return fmt.Errorf("truncated attribute")
		}
		typ, n := binary.LittleEndian.Uint16(attrs), int(binary.LittleEndian.Uint16(attrs[2:]))
		if len(attrs) < sendAttrHdrSize+n {
			return fmt.Errorf("attribute %d overruns its command", typ)
		}
		val := string(attrs[sendAttrHdrSize : sendAttrHdrSize+n])
		attrs = attrs[sendAttrHdrSize+n:]
		switch {
		case typ == 0 || typ > sendAttrLastV1:
			return fmt.Errorf("unknown attribute %d", typ)
		case typ == sendAttrLink && cmd == sendCmdSymlink:
			// A symlink's target: data, resolved inside the chroot.
		case typ == sendAttrPath || typ == sendAttrPathTo || typ == sendAttrLink || typ == sendAttrClone:
			if err := checkStreamPath(val); err != nil {
				return fmt.Errorf("path %q: %w", val, err)
			}
		}
	}
	return nil
}

// checkStreamPath accepts a path relative to the received subvolume that
// names something inside it.
func checkStreamPath(p string) error {
	if p == "" {
		// The subvolume itself (btrfs send names its root "" for chown,
		// chmod and utimes of the top directory).
		return nil
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("absolute")
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("holds a NUL")
	}
	for e := range strings.SplitSeq(p, "/") {
		if e == "" || e == "." || e == ".." {
			return fmt.Errorf("element %q leaves the subvolume or is not canonical", e)
		}
	}
	return nil
}
