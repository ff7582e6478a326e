package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"testing"
)

func TestReadSendHead(t *testing.T) {
	good := fakeSendStream(Volume{Type: VolumeSnapshot, Name: "c1/.migrate-2"})
	rest := []byte("the rest of the stream")
	r := io.MultiReader(bytes.NewReader(good), bytes.NewReader(rest))
	head, name, err := readSendHead(r)
	if err != nil || name != ".migrate-2" || !bytes.Equal(head, good) {
		t.Fatalf("readSendHead = %q, %q, %v", head, name, err)
	}
	if after, _ := io.ReadAll(r); !bytes.Equal(after, rest) {
		t.Errorf("readSendHead read past the first command: %q left", after)
	}

	badCmd := bytes.Clone(good)
	badCmd[sendHeaderLen+4] = 9 // not SUBVOL or SNAPSHOT
	huge := bytes.Clone(good)
	huge[sendHeaderLen+3] = 0x7f // a first command of ~2 GiB
	for name, b := range map[string][]byte{
		"empty":         nil,
		"short":         good[:5],
		"magic":         []byte("btrfs-strea\x00\x00\x01\x00\x00\x00" + string(good[17:])),
		"version 2":     fakeSendStreamVersion(2),
		"command":       badCmd,
		"huge command":  huge,
		"cut attribute": good[:len(good)-3],
	} {
		if _, _, err := readSendHead(bytes.NewReader(b)); !errors.Is(err, ErrTransferFormat) {
			t.Errorf("%s: got %v, want ErrTransferFormat", name, err)
		}
	}
	netErr := errors.New("connection reset")
	if _, _, err := readSendHead(io.MultiReader(bytes.NewReader(good[:5]), errReader{netErr})); !errors.Is(err, netErr) || errors.Is(err, ErrTransferFormat) {
		t.Errorf("read error: got %v, want it as it is", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// fakeSendStream is the beginning of a btrfs send stream creating vol's
// subvolume, cut short after its first command.
func fakeSendStream(vol Volume) []byte {
	name := filepath.Base(vol.Name)
	var attrs bytes.Buffer
	_ = binary.Write(&attrs, binary.LittleEndian, [2]uint16{sendAttrPath, uint16(len(name))})
	attrs.WriteString(name)
	var b bytes.Buffer
	b.WriteString(sendMagic)
	_ = binary.Write(&b, binary.LittleEndian, uint32(sendVersion))
	_ = binary.Write(&b, binary.LittleEndian, uint32(attrs.Len()))
	_ = binary.Write(&b, binary.LittleEndian, uint16(sendCmdSubvol))
	_ = binary.Write(&b, binary.LittleEndian, uint32(0)) // crc
	b.Write(attrs.Bytes())
	return b.Bytes()
}

// fakeSendStreamVersion is a btrfs send stream header of another version.
func fakeSendStreamVersion(v uint32) []byte {
	b := fakeSendStream(Volume{Type: VolumeSnapshot, Name: "c1/.migrate-0"})
	binary.LittleEndian.PutUint32(b[len(sendMagic):], v)
	return b
}
