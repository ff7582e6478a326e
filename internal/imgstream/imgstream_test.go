package imgstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// noParts fails if dir holds a partial (".part") file or a FIFO.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".part" || e.Type()&os.ModeNamedPipe != 0 {
			t.Errorf("left in %s: %s (%v)", dir, e.Name(), e.Type())
		}
	}
}

func TestDirSinkSizes(t *testing.T) {
	for _, volatile := range []bool{false, true} {
		t.Run(map[bool]string{false: "durable", true: "volatile"}[volatile], func(t *testing.T) {
			testDirSinkSizes(t, &DirSink{Dir: t.TempDir(), BlockSize: 64 << 10, Depth: 3, Volatile: volatile})
		})
	}
}

func testDirSinkSizes(t *testing.T, sink *DirSink) {
	dir := sink.Dir
	var total int64
	// 9 MiB + 7 with 64 KiB blocks: the file is grown ahead twice
	// (growBlocks) before its real size is set.
	for _, n := range []int{0, 1, 4095, 4096, 4097, 64 << 10, 5*(64<<10) + 7, 3 << 20, 9<<20 + 7} {
		data := randBytes(t, n)
		name := "f.img"
		// A reader returning short reads, as a pipe does.
		if err := sink.Store(t.Context(), name, io.LimitReader(bytes.NewReader(data), int64(n))); err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d bytes, equal=%v, %v", n, len(got), bytes.Equal(got, data), err)
		}
		total += int64(n)
	}
	if w := sink.Written(); w < total {
		t.Errorf("Written() = %d, want at least %d", w, total)
	}
	noLeftovers(t, dir)
	if err := sink.Store(t.Context(), "../x", bytes.NewReader(nil)); !errors.Is(err, ErrBadName) {
		t.Errorf("bad name: %v", err)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("source broke")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func TestDirSinkFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	sink := &DirSink{Dir: dir, BlockSize: 4096, Depth: 2}
	err := sink.Store(t.Context(), "pages-1.img", &failingReader{n: 100000})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("source broke")) {
		t.Fatalf("err = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := sink.Store(ctx, "pages-2.img", bytes.NewReader(randBytes(t, 1<<20))); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled store: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after cancel: %v", ents)
	}
}

// criuLike opens path as CRIU does (O_WRONLY|O_CREAT|O_TRUNC) and writes
// data to it.
func criuLike(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func TestCapture(t *testing.T) {
	dir := t.TempDir()
	sink := &DirSink{Dir: dir}
	c, err := StartCapture(t.Context(), dir, 3, sink)
	if err != nil {
		t.Fatal(err)
	}
	p1 := randBytes(t, 5<<20+123)
	p4 := []byte("beyond the prepared FIFOs")
	if err := criuLike(filepath.Join(dir, "pages-1.img"), p1); err != nil {
		t.Fatal(err)
	}
	if err := criuLike(filepath.Join(dir, "pages-2.img"), nil); err != nil {
		t.Fatal(err)
	}
	if err := criuLike(filepath.Join(dir, "pages-4.img"), p4); err != nil {
		t.Fatal(err)
	}
	names, err := c.Finish()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"pages-1.img", "pages-2.img"}) {
		t.Errorf("captured %v", names)
	}
	for name, want := range map[string][]byte{"pages-1.img": p1, "pages-2.img": {}, "pages-4.img": p4} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "pages-3.img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unused FIFO left: %v", err)
	}
	noLeftovers(t, dir)
}

type brokenSink struct{}

func (brokenSink) Store(ctx context.Context, name string, r io.Reader) error {
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	return unix.ENOSPC
}

func TestCaptureSinkFailureFailsWriter(t *testing.T) {
	dir := t.TempDir()
	c, err := StartCapture(t.Context(), dir, 2, brokenSink{})
	if err != nil {
		t.Fatal(err)
	}
	// The writer must not block forever on a FIFO nobody reads.
	werr := criuLike(filepath.Join(dir, "pages-1.img"), make([]byte, 64<<20))
	if !errors.Is(werr, unix.EPIPE) {
		t.Errorf("writer: %v, want EPIPE", werr)
	}
	if _, err := c.Finish(); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Finish: %v, want the sink's ENOSPC", err)
	}
	noLeftovers(t, dir)
}

func TestCaptureAbort(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	c, err := StartCapture(ctx, dir, 1, &DirSink{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "pages-1.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	cancel() // as an operation's cancel does
	var werr error
	for werr == nil {
		_, werr = f.Write(make([]byte, 1<<20))
	}
	if !errors.Is(werr, unix.EPIPE) {
		t.Errorf("writer after abort: %v", werr)
	}
	if _, err := c.Finish(); !errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) {
		t.Errorf("Finish after a cancel: %v, want ErrAborted and context.Canceled", err)
	}
	f.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after abort: %v", ents)
	}
}

func TestCaptureAbortBeforeUse(t *testing.T) {
	dir := t.TempDir()
	c, err := StartCapture(t.Context(), dir, 4, &DirSink{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c.Abort()
	c.Abort()
	if _, err := c.Finish(); !errors.Is(err, ErrAborted) || errors.Is(err, context.Canceled) {
		t.Errorf("Finish after Abort: %v, want ErrAborted alone", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after abort: %v", ents)
	}
}

func TestSyncImages(t *testing.T) {
	dir := t.TempDir()
	files := map[string]int{"pages-1.img": 8192, "pages-2.img": 100, "core-1.img": 7, "pstree.img": 0}
	for name, n := range files {
		if err := os.WriteFile(filepath.Join(dir, name), randBytes(t, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("core-1.img", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	total, pages, err := SyncImages(dir, []string{"pages-1.img"})
	if err != nil || total != 8192+100+7 || pages != 8192+100 {
		t.Errorf("SyncImages = %d, %d, %v; want %d, %d", total, pages, err, 8192+100+7, 8192+100)
	}
	if _, _, err := SyncImages(filepath.Join(dir, "missing"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}

// stuckSink reads nothing and returns only when its context ends, as a
// sink stalled on a network does.
type stuckSink struct{ called chan struct{} }

func (s stuckSink) Store(ctx context.Context, name string, r io.Reader) error {
	close(s.called)
	<-ctx.Done()
	return ctx.Err()
}

func TestCaptureAbortStuckSink(t *testing.T) {
	dir := t.TempDir()
	sink := stuckSink{called: make(chan struct{})}
	c, err := StartCapture(t.Context(), dir, 1, sink)
	if err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- criuLike(filepath.Join(dir, "pages-1.img"), make([]byte, 64<<20)) }()
	<-sink.called
	c.Abort() // must not wait for the stuck Store forever
	if err := <-werr; !errors.Is(err, unix.EPIPE) {
		t.Errorf("writer: %v, want EPIPE", err)
	}
	if _, err := c.Finish(); !errors.Is(err, ErrAborted) {
		t.Errorf("Finish: %v, want ErrAborted", err)
	}
	noLeftovers(t, dir)
}

// TestSyncPages: the page files directly in dir (regular ones only) are
// synced and named; PagesAllocated counts the space they were given, not
// their holes.
func TestSyncPages(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "core-1.img"), randBytes(t, 7), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "pages-9.img"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "pages-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randBytes(t, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	names, err := SyncPages(dir)
	if err != nil || !slices.Equal(names, []string{"pages-1.img"}) {
		t.Errorf("SyncPages = %v, %v; want [pages-1.img]", names, err)
	}
	n, err := PagesAllocated(dir)
	if err != nil || n < 1<<20 || n >= 64<<20 {
		t.Errorf("PagesAllocated = %d, %v; want the 1 MiB written, not the 64 MiB size", n, err)
	}
	if _, err := SyncPages(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}
