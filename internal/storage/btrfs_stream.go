package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A btrfs send stream (btrfs-progs, Documentation/dev/dev-send-stream.rst)
// begins with
//
//	char   magic[13];   // "btrfs-stream\0"
//	__le32 version;     // 1 unless sent with --proto
//
// and goes on with commands, each
//
//	__le32 len;         // of the attributes that follow
//	__le16 cmd;
//	__le32 crc32c;
//	attributes: __le16 type, __le16 len, len bytes of data
//
// The first command creates the subvolume: SUBVOL for a whole stream,
// SNAPSHOT for an incremental one; its PATH attribute is the subvolume's
// name, which btrfs receive gives it.
const (
	sendMagic        = "btrfs-stream\x00"
	sendVersion      = 1
	sendHeaderLen    = len(sendMagic) + 4
	sendCmdHeaderLen = 10
	sendCmdSubvol    = 1
	sendCmdSnapshot  = 2
	sendAttrPath     = 15
	sendAttrClUUID   = 20 // CLONE_UUID: an increment's parent
	sendAttrClTrans  = 21 // CLONE_CTRANSID
	sendCmdEnd       = 21
	// sendMaxFirstCmd bounds the first command's attributes: a name,
	// UUIDs and transaction ids take far less.
	sendMaxFirstCmd = 64 << 10
)

// transferFormatBtrfs is the btrfs driver's Info.TransferFormat: a pass is
// a btrfs send stream of protocol version 1.
const transferFormatBtrfs = "btrfs-send/1"

// readSendHead reads the stream header and first command of a btrfs send
// stream from r. It returns the bytes it read (for btrfs receive, before
// the rest of r) and the name of the subvolume the stream creates. A stream
// that is not a btrfs send stream of version 1 gives an error wrapping
// ErrTransferFormat; nothing is created before this check.
func readSendHead(r io.Reader) ([]byte, string, error) {
	head := make([]byte, sendHeaderLen+sendCmdHeaderLen)
	if err := readStreamFull(r, head); err != nil {
		return nil, "", err
	}
	if string(head[:len(sendMagic)]) != sendMagic {
		return nil, "", fmt.Errorf("not a btrfs send stream (it begins %q): %w", head[:16], ErrTransferFormat)
	}
	if v := binary.LittleEndian.Uint32(head[len(sendMagic):]); v != sendVersion {
		return nil, "", fmt.Errorf("btrfs send stream version %d, want %d: %w", v, sendVersion, ErrTransferFormat)
	}
	size := binary.LittleEndian.Uint32(head[sendHeaderLen:])
	cmd := binary.LittleEndian.Uint16(head[sendHeaderLen+4:])
	if (cmd != sendCmdSubvol && cmd != sendCmdSnapshot) || size > sendMaxFirstCmd {
		return nil, "", fmt.Errorf("btrfs send stream does not begin with a subvolume (command %d, %d bytes): %w", cmd, size, ErrTransferFormat)
	}
	attrs := make([]byte, size)
	if err := readStreamFull(r, attrs); err != nil {
		return nil, "", err
	}
	name, ok := sendAttr(attrs, sendAttrPath)
	if !ok || name == "" {
		return nil, "", fmt.Errorf("btrfs send stream names no subvolume: %w", ErrTransferFormat)
	}
	return append(head, attrs...), name, nil
}

// readStreamFull fills buf from r; a stream that ends first is not in the
// format (ErrTransferFormat), other read errors are returned as they are.
func readStreamFull(r io.Reader, buf []byte) error {
	n, err := io.ReadFull(r, buf)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("stream ends after %d bytes: %w", n, ErrTransferFormat)
	}
	return err
}

// sendAttr returns the data of the first attribute of type typ in attrs.
func sendAttr(attrs []byte, typ uint16) (string, bool) {
	for len(attrs) >= 4 {
		t, n := binary.LittleEndian.Uint16(attrs), int(binary.LittleEndian.Uint16(attrs[2:]))
		if len(attrs) < 4+n {
			return "", false
		}
		if t == typ {
			return string(attrs[4 : 4+n]), true
		}
		attrs = attrs[4+n:]
	}
	return "", false
}

// unchangedIncrement reads the beginning of a send stream from r and says
// whether the stream is an increment on prev (a received subvolume) that
// changes nothing: its first command is SNAPSHOT with prev's received UUID
// and the sender's ctransid as its parent (CLONE_UUID, CLONE_CTRANSID:
// what btrfs receive looks its parent up by), the next and last one END,
// then the stream ends, each command with its right checksum. btrfs
// receive would make of it a snapshot of prev and nothing else. If not
// (or on any read error), whole gives the stream from its first byte: what
// was read, then the rest of r.
func unchangedIncrement(r io.Reader, prev subvolInfo) (same bool, whole io.Reader) {
	var seen bytes.Buffer
	tee := io.TeeReader(r, &seen)
	whole = io.MultiReader(&seen, r)
	head, _, err := readSendHead(tee)
	if err != nil || prev.ReceivedUUID == ([btrfsUUIDSize]byte{}) {
		return false, whole
	}
	first := head[sendHeaderLen:]
	if binary.LittleEndian.Uint16(first[4:]) != sendCmdSnapshot || !sendCmdSumOK(first) {
		return false, whole
	}
	uuid, okU := sendAttr(first[sendCmdHeaderLen:], sendAttrClUUID)
	trans, okT := sendAttr(first[sendCmdHeaderLen:], sendAttrClTrans)
	if !okU || !okT || uuid != string(prev.ReceivedUUID[:]) || len(trans) != 8 ||
		binary.LittleEndian.Uint64([]byte(trans)) != prev.Stransid {
		return false, whole
	}
	end := make([]byte, sendCmdHeaderLen)
	if _, err := io.ReadFull(tee, end); err != nil || binary.LittleEndian.Uint32(end) != 0 ||
		binary.LittleEndian.Uint16(end[4:]) != sendCmdEnd || !sendCmdSumOK(end) {
		return false, whole
	}
	var more [1]byte
	if n, err := io.ReadFull(tee, more[:]); n != 0 || err != io.EOF {
		return false, whole
	}
	return true, nil
}

// sendCmdSumOK checks a whole command's checksum: the kernel's crc32c()
// (Castagnoli, seed 0, neither inverted before nor after; Go's
// crc32.Update inverts both) over the command with its crc field zeroed.
func sendCmdSumOK(cmd []byte) bool {
	return binary.LittleEndian.Uint32(cmd[6:]) == sendCmdSum(cmd)
}

// sendCmdSum is the checksum of a whole command (its crc field ignored).
func sendCmdSum(cmd []byte) uint32 {
	c := bytes.Clone(cmd)
	binary.LittleEndian.PutUint32(c[6:], 0)
	return ^crc32.Update(^uint32(0), crc32.MakeTable(crc32.Castagnoli), c)
}
