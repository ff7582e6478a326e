package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
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
