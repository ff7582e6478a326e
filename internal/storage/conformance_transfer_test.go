package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// transferTests move volumes between two pools of the driver under test
// (source first).
var transferTests = []struct {
	name string
	run  func(t *testing.T, src, dst Driver)
}{
	{"TransferContainer", testTransferContainer},
	{"TransferSnapshots", testTransferSnapshots},
	{"TransferAbort", testTransferAbort},
	{"TransferDropLeftovers", testTransferDropLeftovers},
	{"TransferBadStreams", testTransferBadStreams},
}

// moved is the container volume a transfer of ct1 lands in: the target
// may use another name.
var moved = Volume{Type: VolumeContainer, Name: "moved"}

// movePass sends one pass from s to r through a pipe, as over a
// connection, and returns the bytes it carried and both ends' errors.
func movePass(ctx context.Context, s VolumeSender, r VolumeReceiver) (int64, error) {
	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	sent := make(chan error, 1)
	go func() {
		err := s.SendPass(ctx, cw)
		pw.CloseWithError(err) // nil: the reader sees EOF
		sent <- err
	}()
	rerr := r.ReceivePass(ctx, pr)
	pr.CloseWithError(errors.New("receiver done")) // a sender still writing stops
	serr := <-sent
	if serr != nil {
		serr = fmt.Errorf("send: %w", serr)
	}
	return cw.n, errors.Join(serr, rerr)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func mustPass(t *testing.T, s VolumeSender, r VolumeReceiver) int64 {
	t.Helper()
	n, err := movePass(t.Context(), s, r)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return n
}

func mustSender(t *testing.T, d Driver, vol Volume, base *Volume) VolumeSender {
	t.Helper()
	s, err := d.NewSender(vol, base)
	if err != nil {
		t.Fatalf("NewSender(%v): %v", vol, err)
	}
	return s
}

func mustReceiver(t *testing.T, d Driver, vol Volume) VolumeReceiver {
	t.Helper()
	r, err := d.NewReceiver(vol)
	if err != nil {
		t.Fatalf("NewReceiver(%v): %v", vol, err)
	}
	return r
}

// mustClose closes a sender or receiver, twice (Close is idempotent).
func mustClose(t *testing.T, c interface{ Close(context.Context) error }) {
	t.Helper()
	for range 2 {
		if err := c.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

// moveSnapshot moves the snapshot volume vol from src to dst as dstVol in
// its one pass, and returns the bytes the pass carried.
func moveSnapshot(t *testing.T, src, dst Driver, vol Volume, base *Volume, dstVol Volume) int64 {
	t.Helper()
	s, r := mustSender(t, src, vol, base), mustReceiver(t, dst, dstVol)
	n := mustPass(t, s, r)
	if err := s.SendPass(t.Context(), io.Discard); !errors.Is(err, ErrTransferState) {
		t.Errorf("second pass of a snapshot volume: got %v, want ErrTransferState", err)
	}
	if err := r.Commit(t.Context()); err != nil {
		t.Fatalf("Commit(%v): %v", dstVol, err)
	}
	mustClose(t, s)
	mustClose(t, r)
	return n
}

// snapshotDir lists snapshots/NAME of a pool: the container's snapshots
// and whatever transfers of it left.
func snapshotDir(t *testing.T, d Driver, name string) []string {
	t.Helper()
	dir := filepath.Dir(d.Path(Volume{Type: VolumeSnapshot, Name: name + "/x"}))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func checkSnapshotDir(t *testing.T, d Driver, name string, want ...string) {
	t.Helper()
	if got := snapshotDir(t, d, name); !slices.Equal(got, want) {
		t.Errorf("snapshots/%s holds %q, want %q", name, got, want)
	}
}

// fillTransferTree fills a container volume with every kind of entry a
// pass carries, and entries the next changes replace.
func fillTransferTree(t *testing.T, root string) {
	t.Helper()
	files := map[string]string{
		"etc/hostname": "vessel\n", "etc/conf": "v1", "data": "first", "meta": "meta",
		"single": "single", "mode-only": "mode", "becomes-file/inner": "x", "becomes-dir": "file",
		"new\nline": "a name with a newline", "var/tree/a/b/c/file": "deep", "var/tree/x": "x", "owned": "1000",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(root, name), []byte(content))
	}
	writeFile(t, filepath.Join(root, "bin/tool"), bytes.Repeat([]byte{0x7f}, 70000))
	must(t, os.Chmod(filepath.Join(root, "bin/tool"), os.ModeSetuid|0o755))
	must(t, os.Link(filepath.Join(root, "bin/tool"), filepath.Join(root, "bin/tool-link")))
	must(t, os.Symlink("../etc/hostname", filepath.Join(root, "bin/name")))
	must(t, os.Symlink("etc/conf", filepath.Join(root, "conf-link")))
	must(t, os.Symlink("etc", filepath.Join(root, "etcdir")))
	must(t, os.Mkdir(filepath.Join(root, "empty"), 0o700))
	must(t, os.Chown(filepath.Join(root, "owned"), 1000, 1000))
	must(t, os.Mkdir(filepath.Join(root, "dev"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(root, "dev/fifo"), 0o600))
	must(t, unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
}

// changeTree1 changes the tree the way a running container might between
// two passes.
func changeTree1(t *testing.T, root string) {
	t.Helper()
	at := func(p string) string { return filepath.Join(root, p) }
	writeFile(t, at("new/file"), []byte("hello"))
	writeFile(t, at("data"), []byte("second, and longer"))
	must(t, os.Remove(at("etc/hostname"))) // bin/name dangles now
	must(t, os.RemoveAll(at("var/tree")))
	must(t, os.Chmod(at("meta"), 0o640))
	must(t, os.Chown(at("meta"), 1001, 1002))
	mtime := time.Unix(1_600_000_000, 123456789)
	must(t, os.Chtimes(at("meta"), mtime, mtime))
	must(t, os.Symlink("../data", at("new/link")))
	must(t, os.Link(at("single"), at("single-link")))
	must(t, os.Mkdir(at("new/empty"), 0o750))
	// A symlink to a directory replaced by a file: the directory stays.
	must(t, os.Remove(at("etcdir")))
	writeFile(t, at("etcdir"), []byte("was a symlink"))
	// A symlink's own metadata changes: its target stays.
	must(t, os.Lchown(at("conf-link"), 1000, 1000))
	must(t, os.RemoveAll(at("becomes-file")))
	writeFile(t, at("becomes-file"), []byte("was a directory"))
	must(t, os.Remove(at("becomes-dir")))
	writeFile(t, at("becomes-dir/child"), []byte("was a file"))
	must(t, os.Remove(at("new\nline")))
}

// changeTree2 changes the tree once more.
func changeTree2(t *testing.T, root string) {
	t.Helper()
	at := func(p string) string { return filepath.Join(root, p) }
	writeFile(t, at("data"), []byte("third"))
	must(t, os.Chmod(at("mode-only"), 0o600)) // metadata only
	must(t, os.Remove(at("new/link")))
	must(t, os.Chown(at("single"), 1003, 1003)) // both links of the inode
	must(t, os.Remove(at("empty")))
	writeFile(t, at("new/empty/now-full"), []byte("full"))
	must(t, os.Rename(at("new/file"), at("new/renamed")))
	must(t, os.Chmod(at("bin/tool"), os.ModeSetgid|0o755))
}

// testTransferContainer moves a container volume in three passes with
// changes between them; the target ends with the source's tree.
func testTransferContainer(t *testing.T, src, dst Driver) {
	ctx := t.Context()
	if f := src.Info().TransferFormat; f == "" || f != dst.Info().TransferFormat {
		t.Fatalf("TransferFormat %q and %q", f, dst.Info().TransferFormat)
	}
	root := mustCreate(t, src, ct1)
	fillTransferTree(t, root)
	s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	changeTree1(t, root)
	mustPass(t, s, r)
	changeTree2(t, root)
	mustPass(t, s, r)
	if err := r.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	mustClose(t, s)
	mustClose(t, r)

	checkSameTree(t, "after the last pass", root, dst.Path(moved))
	writeFile(t, filepath.Join(dst.Path(moved), "written-after-commit"), []byte("writable"))
	checkSnapshotDir(t, src, ct1.Name)
	checkSnapshotDir(t, dst, moved.Name)
	if !src.VolumeExists(ct1) {
		t.Error("the source volume is gone")
	}
	if err := s.SendPass(ctx, io.Discard); !errors.Is(err, ErrTransferState) {
		t.Errorf("SendPass after Close: got %v, want ErrTransferState", err)
	}
	if err := r.Commit(ctx); !errors.Is(err, ErrTransferState) {
		t.Errorf("second Commit: got %v, want ErrTransferState", err)
	}
}

// testTransferSnapshots moves two snapshots, the second as its difference
// from the first where the driver can, then the container from the newer.
func testTransferSnapshots(t *testing.T, src, dst Driver) {
	root := mustCreate(t, src, ct1)
	fillTransferTree(t, root)
	s1, s2 := snap, Volume{Type: VolumeSnapshot, Name: "c1/s2"}
	d1, d2 := Volume{Type: VolumeSnapshot, Name: "moved/s1"}, Volume{Type: VolumeSnapshot, Name: "moved/s2"}
	must(t, src.CloneVolume(t.Context(), s1, ct1, true))
	changeTree1(t, root)
	must(t, src.CloneVolume(t.Context(), s2, ct1, true))
	changeTree2(t, root)

	moveSnapshot(t, src, dst, s1, nil, d1)
	moveSnapshot(t, src, dst, s2, &s1, d2)
	checkSameTree(t, "snapshot s1", src.Path(s1), dst.Path(d1))
	checkSameTree(t, "snapshot s2", src.Path(s2), dst.Path(d2))

	s, r := mustSender(t, src, ct1, &s2), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	writeFile(t, filepath.Join(root, "data"), []byte("fourth"))
	mustPass(t, s, r)
	must(t, r.Commit(t.Context()))
	mustClose(t, s)
	mustClose(t, r)
	checkSameTree(t, "container", root, dst.Path(moved))
	checkSnapshotDir(t, src, ct1.Name, "s1", "s2")
	checkSnapshotDir(t, dst, moved.Name, "s1", "s2")
}

// testTransferAbort: Close without Commit leaves nothing on either end.
func testTransferAbort(t *testing.T, src, dst Driver) {
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	fillTransferTree(t, root)
	r := mustReceiver(t, dst, moved)
	if err := r.Commit(ctx); !errors.Is(err, ErrTransferState) {
		t.Errorf("Commit without a pass: got %v, want ErrTransferState", err)
	}
	s := mustSender(t, src, ct1, nil)
	mustPass(t, s, r)
	changeTree1(t, root)
	mustPass(t, s, r)
	mustClose(t, s)
	mustClose(t, r)
	if dst.VolumeExists(moved) {
		t.Error("a receive closed without Commit left its volume")
	}
	checkSnapshotDir(t, src, ct1.Name)
	checkSnapshotDir(t, dst, moved.Name)
	if err := r.Commit(ctx); !errors.Is(err, ErrTransferState) {
		t.Errorf("Commit after Close: got %v, want ErrTransferState", err)
	}

	must(t, src.CloneVolume(ctx, snap, ct1, true))
	d1 := Volume{Type: VolumeSnapshot, Name: "moved/s1"}
	s, r = mustSender(t, src, snap, nil), mustReceiver(t, dst, d1)
	mustPass(t, s, r)
	mustClose(t, s)
	mustClose(t, r)
	if dst.VolumeExists(d1) {
		t.Error("a snapshot receive closed without Commit left its volume")
	}
	checkSnapshotDir(t, src, ct1.Name, "s1")
	checkSnapshotDir(t, dst, moved.Name)
	if _, err := dst.NewReceiver(Volume{Type: VolumeImage, Name: "img1"}); !errors.Is(err, ErrInvalidVolume) {
		t.Errorf("receiver of an image volume: got %v, want ErrInvalidVolume", err)
	}
	mustCreate(t, dst, moved)
	if _, err := dst.NewReceiver(moved); !errors.Is(err, ErrVolumeExists) {
		t.Errorf("receiver of an existing volume: got %v, want ErrVolumeExists", err)
	}
}

// testTransferDropLeftovers: DropTransfers removes what a sender and a
// receiver never closed (a daemon crash) left, and nothing else.
func testTransferDropLeftovers(t *testing.T, src, dst Driver) {
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	fillTransferTree(t, root)
	must(t, src.CloneVolume(ctx, snap, ct1, true))
	kept := Volume{Type: VolumeSnapshot, Name: "moved/s1"}
	moveSnapshot(t, src, dst, snap, nil, kept)

	s, r := mustSender(t, src, ct1, &snap), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	changeTree1(t, root)
	mustPass(t, s, r)
	// The daemons die here: neither end is closed.
	must(t, src.DropTransfers(ctx, ct1.Name))
	must(t, dst.DropTransfers(ctx, moved.Name))
	checkSnapshotDir(t, src, ct1.Name, "s1")
	checkSnapshotDir(t, dst, moved.Name, "s1")
	if !src.VolumeExists(ct1) || !src.VolumeExists(snap) || !dst.VolumeExists(kept) {
		t.Error("DropTransfers removed a volume")
	}
	for _, d := range []Driver{src, dst} {
		if err := d.DropTransfers(ctx, "never-moved"); err != nil {
			t.Errorf("DropTransfers with nothing left: %v", err)
		}
		for _, bad := range []string{"", "..", "a/b"} {
			if err := d.DropTransfers(ctx, bad); !errors.Is(err, ErrInvalidVolume) {
				t.Errorf("DropTransfers(%q): got %v, want ErrInvalidVolume", bad, err)
			}
		}
	}
}

// testTransferBadStreams: a stream that is not a whole pass of the
// driver's format fails and leaves nothing.
func testTransferBadStreams(t *testing.T, src, dst Driver) {
	ctx := t.Context()
	root := mustCreate(t, src, ct1)
	fillTransferTree(t, root)
	big := make([]byte, 200<<10)
	_, _ = rand.Read(big)
	writeFile(t, filepath.Join(root, "big"), big)
	var pass bytes.Buffer
	s := mustSender(t, src, ct1, nil)
	must(t, s.SendPass(ctx, &pass))
	mustClose(t, s)
	own := pass.Bytes()

	// Streams of another format, which must fail with ErrTransferFormat;
	// those that are in the driver's format are cut short.
	foreign := map[string][]byte{
		"empty":            nil,
		"garbage":          []byte("not a transfer stream\n"),
		"plain tar":        plainTar(t),
		"tar-sync/9":       tarSyncPass(t, "tar-sync/9"),
		"tar-sync/1":       tarSyncPass(t, transferFormatDir)[:1024], // its format header only
		"btrfs-send/1":     fakeSendStream(transferSnapshot("moved", 0)),
		"btrfs-send/2":     fakeSendStreamVersion(2),
		"btrfs, other vol": fakeSendStream(Volume{Type: VolumeSnapshot, Name: "c1/s1"}),
	}
	format := dst.Info().TransferFormat
	for _, name := range slices.Sorted(maps.Keys(foreign)) {
		checkBadStream(t, dst, name, foreign[name], name != format)
	}
	checkBadStream(t, dst, "own pass, corrupted", corrupt(own, 100), false)
	for _, cut := range []int{len(own) / 2, len(own) - 2048, len(own) - 10, len(own) - 1} {
		checkBadStream(t, dst, fmt.Sprintf("own pass, %d of %d bytes", cut, len(own)), own[:cut], false)
	}
}

// checkBadStream receives b as a pass and checks that it fails (with
// ErrTransferFormat if format) and leaves nothing.
func checkBadStream(t *testing.T, d Driver, name string, b []byte, format bool) {
	t.Helper()
	ctx := t.Context()
	r := mustReceiver(t, d, moved)
	err := r.ReceivePass(ctx, bytes.NewReader(b))
	switch {
	case err == nil:
		t.Errorf("%s: received", name)
	case format && !errors.Is(err, ErrTransferFormat):
		t.Errorf("%s: got %v, want ErrTransferFormat", name, err)
	}
	if d.VolumeExists(moved) {
		t.Errorf("%s: a failed pass left the volume", name)
	}
	checkSnapshotDir(t, d, moved.Name)
	if err := r.ReceivePass(ctx, bytes.NewReader(b)); !errors.Is(err, ErrTransferState) {
		t.Errorf("%s: a pass after a failed one: got %v, want ErrTransferState", name, err)
	}
	if err := r.Commit(ctx); !errors.Is(err, ErrTransferState) {
		t.Errorf("%s: Commit after a failed pass: got %v, want ErrTransferState", name, err)
	}
	mustClose(t, r)
	checkSnapshotDir(t, d, moved.Name)
}

// plainTar is a tar archive of one file: tar, but not a pass.
func plainTar(t *testing.T) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	must(t, tw.WriteHeader(&tar.Header{Name: "./file", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte("hi"))
	must(t, err)
	must(t, tw.Close())
	return b.Bytes()
}

// tarSyncPass is a pass of a small tree in the dir driver's format, named
// format.
func tarSyncPass(t *testing.T, format string) []byte {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "file"), []byte("content"))
	var b bytes.Buffer
	_, err := writePass(t.Context(), root, nil, &b)
	must(t, err)
	if format == transferFormatDir {
		return b.Bytes()
	}
	out := bytes.Replace(b.Bytes(), []byte(transferFormatDir), []byte(format), 1)
	// The record's length prefix stays right (same length); the header's
	// checksum does not cover the data block.
	return out
}

// corrupt returns a copy of b with the byte at off flipped.
func corrupt(b []byte, off int) []byte {
	c := bytes.Clone(b)
	c[off] ^= 0xff
	return c
}
