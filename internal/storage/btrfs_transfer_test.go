package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// mountedLoopPools returns two mounted loop-backed pools: source, target.
func mountedLoopPools(t *testing.T) (Driver, Driver) {
	t.Helper()
	src, _ := mountedLoopPool(t)
	dst, _ := mountedLoopPool(t)
	return src, dst
}

// TestBtrfsTransferIncremental: snapshots after the first and the
// container's first pass move as differences from their base; received
// snapshots are read-only, the committed container writable; transfer
// snapshots exist on both ends until Close.
func TestBtrfsTransferIncremental(t *testing.T) {
	testutil.NeedRoot(t)
	src, dst := mountedLoopPools(t)
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	writeFile(t, filepath.Join(root, "big"), big)
	s1, s2 := snap, Volume{Type: VolumeSnapshot, Name: "c1/s2"}
	d1, d2 := Volume{Type: VolumeSnapshot, Name: "moved/s1"}, Volume{Type: VolumeSnapshot, Name: "moved/s2"}
	must(t, src.CloneVolume(ctx, s1, ct1, true))
	writeFile(t, filepath.Join(root, "small"), []byte("a small change"))
	must(t, src.CloneVolume(ctx, s2, ct1, true))

	if n := moveSnapshot(t, src, dst, s1, nil, d1); n < int64(len(big)) {
		t.Errorf("whole snapshot: %d bytes, less than its content", n)
	}
	if n := moveSnapshot(t, src, dst, s2, &s1, d2); n > 64<<10 {
		t.Errorf("snapshot with a base: %d bytes, want a small difference", n)
	}
	for _, vol := range []Volume{d1, d2} {
		if err := os.WriteFile(filepath.Join(dst.Path(vol), "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("writing into received %v: got %v, want EROFS", vol, err)
		}
	}

	s, r := mustSender(t, src, ct1, &s2), mustReceiver(t, dst, moved)
	if n := mustPass(t, s, r); n > 64<<10 {
		t.Errorf("first container pass with a base: %d bytes, want a small difference", n)
	}
	writeFile(t, filepath.Join(root, "small"), []byte("changed again"))
	mustPass(t, s, r)
	checkSnapshotDir(t, src, "c1", ".migrate-0", ".migrate-1", "s1", "s2")
	checkSnapshotDir(t, dst, "moved", ".migrate-0", ".migrate-1", "s1", "s2")
	must(t, r.Commit(ctx))
	mustClose(t, s)
	mustClose(t, r)
	checkSnapshotDir(t, src, "c1", "s1", "s2")
	checkSnapshotDir(t, dst, "moved", "s1", "s2")
	checkSameTree(t, "container", root, dst.Path(moved))
	writeFile(t, filepath.Join(dst.Path(moved), "new"), []byte("writable"))
}

// TestBtrfsTransferCrashLeftovers: transfer snapshots a crashed run left
// under the names a new transfer uses are replaced, on both ends; and
// DropTransfers removes half-received (writable) ones too.
func TestBtrfsTransferCrashLeftovers(t *testing.T) {
	testutil.NeedRoot(t)
	src, dst := mountedLoopPools(t)
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	writeFile(t, filepath.Join(root, "file"), []byte("new run"))
	for _, d := range []Driver{src, dst} {
		name := map[Driver]string{src: "c1", dst: "moved"}[d]
		stale := transferSnapshot(name, 0)
		mustCreate(t, d, stale)
		writeFile(t, filepath.Join(d.Path(stale), "file"), []byte("crashed run"))
	}
	s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	must(t, r.Commit(ctx))
	mustClose(t, s)
	mustClose(t, r)
	checkSameTree(t, "container", root, dst.Path(moved))
	checkSnapshotDir(t, src, "c1")
	checkSnapshotDir(t, dst, "moved")

	half := transferSnapshot("moved", 3)
	mustCreate(t, dst, half) // a receive cut by a crash: writable
	must(t, dst.CloneVolume(ctx, transferSnapshot("moved", 2), moved, true))
	must(t, dst.DropTransfers(ctx, "moved"))
	checkSnapshotDir(t, dst, "moved")
	if !dst.VolumeExists(moved) {
		t.Error("DropTransfers removed the container volume")
	}
}

// TestBtrfsReceiveWrongPass: a pass of another volume than the receiver
// expects is refused before anything is received.
func TestBtrfsReceiveWrongPass(t *testing.T) {
	testutil.NeedRoot(t)
	src, dst := mountedLoopPools(t)
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	writeFile(t, filepath.Join(root, "file"), []byte("x"))
	must(t, src.CloneVolume(ctx, snap, ct1, true))
	var snapPass, ctPass bytes.Buffer
	s := mustSender(t, src, snap, nil)
	must(t, s.SendPass(ctx, &snapPass))
	mustClose(t, s)
	s = mustSender(t, src, ct1, nil)
	must(t, s.SendPass(ctx, &ctPass))
	mustClose(t, s)

	for _, tc := range []struct {
		into Volume
		pass []byte
	}{
		{moved, snapPass.Bytes()},
		{Volume{Type: VolumeSnapshot, Name: "moved/s1"}, ctPass.Bytes()},
		{Volume{Type: VolumeSnapshot, Name: "moved/other"}, snapPass.Bytes()},
	} {
		r := mustReceiver(t, dst, tc.into)
		if err := r.ReceivePass(ctx, bytes.NewReader(tc.pass)); !errors.Is(err, ErrTransferFormat) {
			t.Errorf("%v: got %v, want ErrTransferFormat", tc.into, err)
		}
		mustClose(t, r)
		checkSnapshotDir(t, dst, "moved")
	}
}

// TestBtrfsPreparedPass: a pass whose btrfs receive was started before it
// (PassPreparer) is received as any other, a refused stream fed to one
// leaves nothing, and one never fed is ended by Close with nothing made.
func TestBtrfsPreparedPass(t *testing.T) {
	testutil.NeedRoot(t)
	src, dst := mountedLoopPools(t)
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	writeFile(t, filepath.Join(root, "file"), []byte("first"))

	s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
	pp, ok := r.(PassPreparer)
	if !ok {
		t.Fatal("the btrfs receiver is no PassPreparer")
	}
	mustPass(t, s, r)
	must(t, pp.PrepareNextPass(ctx))
	writeFile(t, filepath.Join(root, "file"), []byte("second"))
	mustPass(t, s, r)
	checkSnapshotDir(t, dst, "moved", ".migrate-0", ".migrate-1")
	must(t, pp.PrepareNextPass(ctx)) // never fed
	must(t, r.Commit(ctx))
	mustClose(t, s)
	mustClose(t, r)
	checkSnapshotDir(t, dst, "moved")
	checkSameTree(t, "container", root, dst.Path(moved))

	// A prepared receive fed a pass of the wrong volume: refused, nothing left.
	other := Volume{Type: VolumeContainer, Name: "other"}
	s, r = mustSender(t, src, ct1, nil), mustReceiver(t, dst, other)
	mustPass(t, s, r)
	must(t, r.(PassPreparer).PrepareNextPass(ctx))
	var wrong bytes.Buffer
	must(t, src.CloneVolume(ctx, snap, ct1, true))
	ws := mustSender(t, src, snap, nil)
	must(t, ws.SendPass(ctx, &wrong))
	mustClose(t, ws)
	if err := r.ReceivePass(ctx, bytes.NewReader(wrong.Bytes())); !errors.Is(err, ErrTransferFormat) {
		t.Errorf("wrong pass into a prepared receive: got %v, want ErrTransferFormat", err)
	}
	mustClose(t, s)
	mustClose(t, r)
	checkSnapshotDir(t, dst, "other")
}

// failingWriter takes n bytes, then fails.
type failingWriter struct {
	n   int
	err error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, w.err
	}
	w.n -= len(p)
	return len(p), nil
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestBtrfsSendEnds: the in-process send (BTRFS_IOC_SEND) ends with the
// writer's error when the writer fails mid-stream, and with ctx's when ctx
// is cancelled (the kernel's writes then meet a closed pipe: EPIPE, and a
// SIGPIPE the process ignores); neither leaves a descriptor open.
func TestBtrfsSendEnds(t *testing.T) {
	testutil.NeedRoot(t)
	src, _ := mountedLoopPool(t)
	root := mustCreate(t, src, ct1)
	big := make([]byte, 4<<20)
	_, _ = rand.Read(big)
	writeFile(t, filepath.Join(root, "big"), big)
	before := openFds(t)

	cut := errors.New("the connection is gone")
	s := mustSender(t, src, ct1, nil)
	if err := s.SendPass(t.Context(), &failingWriter{n: 64 << 10, err: cut}); !errors.Is(err, cut) {
		t.Errorf("a writer failing mid-stream: got %v, want its error", err)
	}
	mustClose(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s = mustSender(t, src, ct1, nil)
	var b bytes.Buffer
	if err := s.SendPass(ctx, &b); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled send: got %v, want context.Canceled", err)
	}
	mustClose(t, s)
	if after := openFds(t); after != before {
		t.Errorf("%d descriptors open after the sends, %d before", after, before)
	}

	// And a whole send still arrives whole.
	s = mustSender(t, src, ct1, nil)
	b.Reset()
	must(t, s.SendPass(t.Context(), &b))
	mustClose(t, s)
	if b.Len() < len(big) {
		t.Errorf("a whole send: %d bytes, less than its content", b.Len())
	}
}
