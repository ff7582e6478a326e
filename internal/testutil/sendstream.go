package testutil

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strconv"
)

// SendStream builds btrfs send streams (protocol version 1, btrfs-progs
// Documentation/dev/dev-send-stream.rst) command by command, for tests that
// play a hostile peer: each command is framed and checksummed as btrfs
// send does, so btrfs receive acts on it.
type SendStream struct {
	b   bytes.Buffer
	ino uint64
}

// Send stream command and attribute numbers (btrfs-progs send.h).
const (
	sendCmdSubvol  = 1
	sendCmdMkfile  = 3
	sendCmdMkdir   = 4
	sendCmdSymlink = 8
	sendCmdRename  = 9
	sendCmdWrite   = 15
	sendCmdClone   = 16
	sendCmdEnd     = 21

	sendAttrUUID      = 1
	sendAttrCtransid  = 2
	sendAttrIno       = 3
	sendAttrPath      = 15
	sendAttrPathTo    = 16
	sendAttrPathLink  = 17
	sendAttrOffset    = 18
	sendAttrData      = 19
	sendAttrCloneUUID = 20
	sendAttrCloneCtid = 21
	sendAttrClonePath = 22
	sendAttrCloneOff  = 23
	sendAttrCloneLen  = 24
)

// NewSendStream begins a whole (not incremental) stream creating the
// subvolume name.
func NewSendStream(name string) *SendStream {
	s := &SendStream{ino: 256}
	s.b.WriteString("btrfs-stream\x00")
	_ = binary.Write(&s.b, binary.LittleEndian, uint32(1))
	uuid := bytes.Repeat([]byte{0x5a}, 16)
	s.cmd(sendCmdSubvol, attr(sendAttrPath, []byte(name)), attr(sendAttrUUID, uuid), attr(sendAttrCtransid, u64(7)))
	return s
}

// Mkdir adds a directory.
func (s *SendStream) Mkdir(path string) *SendStream {
	s.ino++
	s.cmd(sendCmdMkdir, attr(sendAttrPath, []byte(path)), attr(sendAttrIno, u64(s.ino)))
	return s
}

// Symlink adds a symlink path -> target.
func (s *SendStream) Symlink(path, target string) *SendStream {
	s.ino++
	s.cmd(sendCmdSymlink, attr(sendAttrPath, []byte(path)), attr(sendAttrIno, u64(s.ino)), attr(sendAttrPathLink, []byte(target)))
	return s
}

// File adds a regular file with data at path, made as btrfs send makes
// one: created under a temporary name, renamed, then written.
func (s *SendStream) File(path string, data []byte) *SendStream {
	s.ino++
	tmp := "o" + strconv.FormatUint(s.ino, 10) + "-7-0"
	s.cmd(sendCmdMkfile, attr(sendAttrPath, []byte(tmp)), attr(sendAttrIno, u64(s.ino)))
	s.cmd(sendCmdRename, attr(sendAttrPath, []byte(tmp)), attr(sendAttrPathTo, []byte(path)))
	s.cmd(sendCmdWrite, attr(sendAttrPath, []byte(path)), attr(sendAttrOffset, u64(0)), attr(sendAttrData, data))
	return s
}

// CreateAt adds a regular file with data made at path directly (btrfs send
// never does; a hostile stream may): MKFILE path, then WRITE.
func (s *SendStream) CreateAt(path string, data []byte) *SendStream {
	s.ino++
	s.cmd(sendCmdMkfile, attr(sendAttrPath, []byte(path)), attr(sendAttrIno, u64(s.ino)))
	s.cmd(sendCmdWrite, attr(sendAttrPath, []byte(path)), attr(sendAttrOffset, u64(0)), attr(sendAttrData, data))
	return s
}

// Clone adds a clone of n bytes of clonePath in the subvolume with the
// given UUID into path.
func (s *SendStream) Clone(path string, uuid []byte, clonePath string, n uint64) *SendStream {
	s.cmd(sendCmdClone, attr(sendAttrPath, []byte(path)), attr(sendAttrOffset, u64(0)), attr(sendAttrCloneLen, u64(n)),
		attr(sendAttrCloneUUID, uuid), attr(sendAttrCloneCtid, u64(7)), attr(sendAttrClonePath, []byte(clonePath)),
		attr(sendAttrCloneOff, u64(0)))
	return s
}

// Bytes ends the stream (END) and returns it.
func (s *SendStream) Bytes() []byte {
	s.cmd(sendCmdEnd)
	return s.b.Bytes()
}

// cmd appends one command: le32 length of the attributes, le16 command,
// le32 crc32c of the whole command computed with the crc field zero
// (btrfs's crc32c: seed 0, no final inversion).
func (s *SendStream) cmd(cmd uint16, attrs ...[]byte) {
	body := bytes.Join(attrs, nil)
	c := make([]byte, 10, 10+len(body))
	binary.LittleEndian.PutUint32(c, uint32(len(body)))
	binary.LittleEndian.PutUint16(c[4:], cmd)
	c = append(c, body...)
	binary.LittleEndian.PutUint32(c[6:], crc32Raw(c))
	s.b.Write(c)
}

// crc32Raw is crc32c with seed 0 and no inversions, as btrfs computes it.
func crc32Raw(p []byte) uint32 {
	// crc32.Update(c, tab, p) computes ^raw(^c, p): with c = ^0 the
	// result is ^raw(0, p).
	return ^crc32.Update(^uint32(0), crc32.MakeTable(crc32.Castagnoli), p)
}

func attr(typ uint16, data []byte) []byte {
	a := make([]byte, 4, 4+len(data))
	binary.LittleEndian.PutUint16(a, typ)
	binary.LittleEndian.PutUint16(a[2:], uint16(len(data)))
	return append(a, data...)
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
