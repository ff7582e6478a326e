package storage

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// lastPass sends s's next pass and gives it to r as the last one; it
// returns the stream.
func lastPass(t *testing.T, s VolumeSender, r VolumeReceiver) []byte {
	t.Helper()
	var b bytes.Buffer
	must(t, s.SendPass(t.Context(), &b))
	must(t, r.(LastPassReceiver).ReceiveLastPass(t.Context(), bytes.NewReader(b.Bytes())))
	return b.Bytes()
}

// TestBtrfsUnchangedLastPass: a last pass that changes nothing is not
// applied (no subvolume made, the prepared receive ended) and Commit makes
// the volume from the pass before; a last pass with any change (data not
// yet written back, a mode, a removal) is applied. No pass follows a last
// one.
func TestBtrfsUnchangedLastPass(t *testing.T) {
	testutil.NeedRoot(t)
	src, dst := mountedLoopPools(t)
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	writeFile(t, filepath.Join(root, "file"), []byte("first"))
	writeFile(t, filepath.Join(root, "gone"), []byte("soon removed"))

	s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	must(t, r.(PassPreparer).PrepareNextPass(ctx))
	stream := lastPass(t, s, r)
	prev, err := getSubvolInfo(dst.Path(Volume{Type: VolumeSnapshot, Name: "moved/.migrate-0"}))
	must(t, err)
	if same, _ := unchangedIncrement(bytes.NewReader(stream), prev); !same {
		t.Errorf("the kernel's stream of an unchanged pass (%d bytes) is not seen as unchanged", len(stream))
	}
	checkSnapshotDir(t, dst, "moved", ".migrate-0")
	if err := r.ReceivePass(ctx, bytes.NewReader(stream)); !errors.Is(err, ErrTransferState) {
		t.Errorf("a pass after the last: got %v, want ErrTransferState", err)
	}
	must(t, r.Commit(ctx))
	mustClose(t, s)
	mustClose(t, r)
	checkSnapshotDir(t, dst, "moved")
	checkSameTree(t, "unchanged", root, dst.Path(moved))
	must(t, dst.DeleteVolume(ctx, moved))

	for _, c := range []struct {
		what   string
		change func()
	}{
		{"data not written back", func() {
			if err := os.WriteFile(filepath.Join(root, "file"), []byte("second, in the page cache"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a mode", func() { must(t, os.Chmod(filepath.Join(root, "file"), 0o600)) }},
		{"a removal", func() { must(t, os.Remove(filepath.Join(root, "gone"))) }},
	} {
		s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
		mustPass(t, s, r)
		must(t, r.(PassPreparer).PrepareNextPass(ctx))
		c.change()
		lastPass(t, s, r)
		checkSnapshotDir(t, dst, "moved", ".migrate-0", ".migrate-1")
		must(t, r.Commit(ctx))
		mustClose(t, s)
		mustClose(t, r)
		checkSameTree(t, c.what, root, dst.Path(moved))
		must(t, dst.DeleteVolume(ctx, moved))
	}
}

// unchangedStream is an increment stream: SNAPSHOT on parent uuid at
// ctransid, then the commands in rest.
func unchangedStream(uuid [btrfsUUIDSize]byte, ctransid uint64, rest ...[]byte) []byte {
	var attrs []byte
	attrs = appendSendAttr(attrs, sendAttrPath, []byte(".migrate-1"))
	attrs = appendSendAttr(attrs, sendAttrClUUID, uuid[:])
	attrs = appendSendAttr(attrs, sendAttrClTrans, le64(ctransid))
	b := []byte(sendMagic)
	b = append(b, 1, 0, 0, 0)
	b = append(b, sendCmd(sendCmdSnapshot, attrs)...)
	for _, r := range rest {
		b = append(b, r...)
	}
	return b
}

func TestUnchangedIncrement(t *testing.T) {
	prev := subvolInfo{ReceivedUUID: [16]byte{1, 2, 3}, Stransid: 77}
	end := sendCmd(sendCmdEnd, nil)
	badEnd := bytes.Clone(end)
	badEnd[7] ^= 1
	for _, c := range []struct {
		what   string
		stream []byte
		same   bool
	}{
		{"SNAPSHOT on prev, END", unchangedStream(prev.ReceivedUUID, 77, end), true},
		{"another parent", unchangedStream([16]byte{9}, 77, end), false},
		{"another ctransid", unchangedStream(prev.ReceivedUUID, 78, end), false},
		{"a change", unchangedStream(prev.ReceivedUUID, 77, sendCmd(18, appendSendAttr(nil, sendAttrPath, []byte("f"))), end), false},
		{"a bad checksum", unchangedStream(prev.ReceivedUUID, 77, badEnd), false},
		{"no END", unchangedStream(prev.ReceivedUUID, 77), false},
		{"bytes after END", unchangedStream(prev.ReceivedUUID, 77, end, []byte{0}), false},
	} {
		same, whole := unchangedIncrement(bytes.NewReader(c.stream), prev)
		if same != c.same {
			t.Errorf("%s: same %v, want %v", c.what, same, c.same)
		}
		if same {
			continue
		}
		got, err := io.ReadAll(whole)
		if err != nil || !bytes.Equal(got, c.stream) {
			t.Errorf("%s: the whole stream back: %d bytes (%v), want %d", c.what, len(got), err, len(c.stream))
		}
	}
	if same, _ := unchangedIncrement(bytes.NewReader(unchangedStream(prev.ReceivedUUID, 77, end)), subvolInfo{}); same {
		t.Error("unchanged on a subvolume never received")
	}
}

// appendSendAttr appends a send stream attribute.
func appendSendAttr(b []byte, typ uint16, data []byte) []byte {
	b = append(b, byte(typ), byte(typ>>8), byte(len(data)), byte(len(data)>>8))
	return append(b, data...)
}

// sendCmd is a whole send stream command with its checksum.
func sendCmd(cmd uint16, attrs []byte) []byte {
	n := len(attrs)
	b := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), byte(cmd), byte(cmd >> 8), 0, 0, 0, 0}
	b = append(b, attrs...)
	sum := sendCmdSum(b)
	b[6], b[7], b[8], b[9] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}
