package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/imgstream"
)

// counterScript counts in /tmp/count (a file of the test's rootfs, so the
// host reads it too) and prints "tick N" every 0.1 s.
const counterScript = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; echo tick $i; sleep 0.1; done"

// fileCount is the counter's last value as the host sees it (0 before the
// first write).
func (e *testEnv) fileCount() int {
	b, _ := os.ReadFile(filepath.Join(e.rootfs, "tmp/count"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// cgroup returns the manager of container id's cgroup; a test that
// freezes it gets it thawed at cleanup.
func (e *testEnv) cgroup(id string) cgroups.Manager {
	e.t.Helper()
	cg, err := cgroups.New(e.cgroups + "/" + id)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cg.Thaw() })
	return cg
}

func (e *testEnv) freeze(cg cgroups.Manager) {
	e.t.Helper()
	if err := cg.Freeze(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// pids lists the processes of cg, failing the test on error.
func (e *testEnv) pids(cg cgroups.Manager) []int {
	e.t.Helper()
	pids, err := cg.Pids()
	if err != nil || len(pids) == 0 {
		e.t.Fatalf("pids of the container: %v %v", pids, err)
	}
	return pids
}

// checkRuns checks that container id runs and is nobody's tracee any more:
// exec works and the counter moves on.
func (e *testEnv) checkRuns(id string, cg cgroups.Manager) {
	e.t.Helper()
	if pid := tracedAmong(e.pids(cg)); pid != 0 {
		e.t.Errorf("task %d is still traced", pid)
	}
	if err := cg.Thaw(); err != nil {
		e.t.Fatal(err)
	}
	if code, _ := e.execOut(id, "true"); code != 0 {
		e.t.Errorf("exec after the dump: exit %d", code)
	}
	n := e.fileCount()
	waitFor(e.t, "the counter to move on from %d", func() bool { return e.fileCount() > n }, func() any { return n })
}

// fifos lists the FIFOs in dir.
func fifos(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if ent.Type()&os.ModeNamedPipe != 0 {
			out = append(out, ent.Name())
		}
	}
	return out
}

// criuChildren lists our child processes that run criu (the CRIU service
// of a prepared checkpoint).
func criuChildren(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if s[open+1:end] == "criu" && len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// TestCheckpointRestore dumps a counting container with its page files
// captured into a DirSink, restores it from the images and checks that it
// counts on from where it was. "direct": a session prepared before the
// freeze, a direct dump that leaves the container running (killed before
// the thaw, so that its files are as the images expect). "runc": the
// one-call Checkpoint without leave-running, which is `runc checkpoint`.
func TestCheckpointRestore(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "direct", false: "runc"}[direct], func(t *testing.T) {
			testCheckpointRestore(t, direct)
		})
	}
}

func testCheckpointRestore(t *testing.T, direct bool) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "cr1"
	bundle, exits := e.startCounter(id, 5)
	images, work := filepath.Join(e.dir, "ckpt"), filepath.Join(e.dir, "ckpt-work")
	o := CheckpointOptions{ImagePath: images, WorkPath: work, Pages: &imgstream.DirSink{Dir: images}}
	var ck *Checkpoint
	var before int
	if direct {
		o.LeaveRunning = true
		var err error
		if ck, err = e.rt.NewCheckpoint(ctx, id, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ck.Abort)
		if ck.svc == nil || ck.runc != nil {
			t.Fatal("not a direct dump")
		}
		cg := e.cgroup(id)
		e.freeze(cg)
		before = e.fileCount()
		if err := ck.Run(); err != nil {
			t.Fatal(err)
		}
		if err := ck.Wait(); err != nil {
			t.Errorf("Wait after Run: %v", err)
		}
		// runc kill --all signals the frozen tasks, then thaws them: they
		// die without running on.
		e.killDelete(id, exits)
	} else {
		if err := e.rt.Checkpoint(ctx, id, o); err != nil {
			t.Fatal(err)
		}
		receive(t, exits) // the dumped container was killed, its shim ended
		before = e.fileCount()
	}
	if st, _, err := e.rt.State(ctx, id); err != nil || st != StatusUnknown {
		t.Fatalf("state after checkpoint = %q %v", st, err)
	}
	if before <= 0 {
		t.Fatalf("count at checkpoint %d", before)
	}
	if direct {
		checkCaptured(t, ck, images)
	}
	if f := fifos(images); len(f) > 0 {
		t.Errorf("FIFOs left: %v", f)
	}

	p, err := e.rt.Restore(ctx, id, bundle, RestoreOptions{ImagePath: images, WorkPath: filepath.Join(e.dir, "restore-work")})
	if err != nil {
		t.Fatal(err)
	}
	if p.InitPid <= 0 {
		t.Fatalf("restored process %+v", p)
	}
	// A fresh start would print "tick 1"; the restored process goes on
	// from the count it had.
	waitFor(t, "tick %d after restore", e.logContains(id, fmt.Sprintf("tick %d\n", before+1)), func() any { return before + 1 })
	waitFor(t, "the counter to move on", func() bool { return e.fileCount() > before })
	if err := e.rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.checkGone(id)
}

// checkCaptured checks a finished copy-mode checkpoint: the page files
// went through the sink and Written counted exactly their bytes.
func checkCaptured(t *testing.T, ck *Checkpoint, images string) {
	t.Helper()
	pages := ck.Pages()
	if len(pages) == 0 {
		t.Fatal("no page file captured")
	}
	var size int64
	for _, name := range pages {
		fi, err := os.Stat(filepath.Join(images, name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("captured %s: %v", name, err)
		}
		size += fi.Size()
	}
	if size == 0 || ck.Written() != size {
		t.Errorf("Written() = %d, page files %v hold %d bytes", ck.Written(), pages, size)
	}
	_, pageBytes, err := imgstream.SyncImages(images, pages)
	if err != nil || pageBytes != uint64(size) {
		t.Errorf("SyncImages: %d page bytes, %v; want %d (no page file outside the capture)", pageBytes, err, size)
	}
	if ck.PageConn() != nil {
		t.Error("PageConn() without Lazy")
	}
}

// TestCheckpointLazy makes lazy dumps of a frozen container and ends their
// page servers without a client: by Abort, and by the end of vessel's
// socket (as when the daemon dies) and ReleaseLazyDump as a restarted
// daemon does for a dump its predecessor left. The page server listens on
// no TCP port.
func TestCheckpointLazy(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "lazy1"
	e.start(id, "/bin/sh", "-c", counterScript)
	waitFor(t, "the counter to reach 3", func() bool { return e.fileCount() >= 3 })
	cg := e.cgroup(id)

	for _, how := range []string{"abort", "release"} {
		images := filepath.Join(e.dir, "ckpt-"+how)
		ck, err := e.rt.NewCheckpoint(ctx, id, CheckpointOptions{ImagePath: images, LeaveRunning: true, Lazy: true,
			Pages: &imgstream.DirSink{Dir: images}}) // ignored with Lazy
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ck.Abort)
		if ck.PageConn() == nil {
			t.Fatal("PageConn() = nil with Lazy")
		}
		if f := fifos(images); len(f) > 0 {
			t.Errorf("%s: a lazy dump made FIFOs: %v", how, f)
		}
		e.freeze(cg)
		if err := ck.Run(); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if tracedAmong(e.pids(cg)) == 0 {
			t.Errorf("%s: no task traced while the page server runs", how)
		}
		if tcp := criuTCPSockets(t, e.pids(cg)); len(tcp) > 0 {
			t.Errorf("%s: the page server's CRIU holds TCP sockets %v", how, tcp)
		}
		if _, err := os.Stat(filepath.Join(images, "pstree.img")); err != nil {
			t.Errorf("%s: images not written when Run returned: %v", how, err)
		}
		t0 := time.Now()
		if how == "abort" {
			ck.Abort()
			ck.Abort()
		} else {
			ck.PageConn().Close() // what the death of the daemon does
			if err := ReleaseLazyDump(PageServerSocket, cg.Pids); err != nil {
				t.Error(err)
			}
		}
		t.Logf("%s: released in %s", how, time.Since(t0))
		done := make(chan error, 1)
		go func() { done <- ck.Wait() }()
		select {
		case err := <-done:
			t.Logf("%s: dump result %v", how, err)
		case <-time.After(patience):
			t.Fatalf("%s: Wait still blocks after the page server was hung up on", how)
		}
		if err := ck.Run(); err == nil {
			t.Errorf("%s: a second Run: %v", how, err)
		}
		e.checkRuns(id, cg)
	}
}

// blockingSink takes no data: Store waits for its context to end. With
// fail set it reads 1 MiB instead, then fails as a full disk does.
type blockingSink struct {
	once    sync.Once
	started chan struct{}
	fail    bool
}

func (s *blockingSink) Store(ctx context.Context, name string, r io.Reader) error {
	s.once.Do(func() { close(s.started) })
	if s.fail {
		if _, err := io.ReadFull(r, make([]byte, 1<<20)); err != nil {
			return err
		}
		return unix.ENOSPC
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestCheckpointCancel stops dumps whose sink is stuck, by cancelling the
// session's context and by Abort, and has the sink fail on its own: CRIU's
// writes fail, it lets go of the container, which runs on; no FIFO stays;
// the error names the cause, not CRIU's broken pipe.
func TestCheckpointCancel(t *testing.T) {
	e := newTestEnv(t)
	id := "cancel1"
	// 32 MiB held by the shell (more than a FIFO's buffer): CRIU blocks
	// on the pipe until the capture is aborted. (The substitution drops
	// the last newline.)
	e.start(id, "/bin/sh", "-c", "x=$(yes | head -c 33554432); echo ready ${#x}; "+counterScript)
	waitFor(t, "the memory to be filled (log %q)", e.logContains(id, "ready 33554431"), func() any {
		b, _ := os.ReadFile(e.rt.LogPath(id))
		return string(b)
	})
	waitFor(t, "the counter to start", func() bool { return e.fileCount() >= 1 })
	cg := e.cgroup(id)

	for _, how := range []string{"cancel", "abort", "sink"} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		images := filepath.Join(e.dir, "ckpt-"+how)
		sink := &blockingSink{started: make(chan struct{}), fail: how == "sink"}
		ck, err := e.rt.NewCheckpoint(ctx, id, CheckpointOptions{ImagePath: images, LeaveRunning: true, Pages: sink})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ck.Abort)
		e.freeze(cg)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-sink.started:
			case <-time.After(patience):
			}
			switch how {
			case "cancel":
				cancel()
			case "abort":
				ck.Abort() // returns once the dump has ended
			}
		}()
		err = ck.Run()
		<-stopped
		want := map[string]error{"cancel": context.Canceled, "abort": imgstream.ErrAborted, "sink": unix.ENOSPC}[how]
		if !errors.Is(err, want) || !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("%s: Run = %v, want ErrCheckpoint and %v", how, err, want)
		}
		t.Logf("%s: Run (expected): %v", how, err)
		if werr := ck.Wait(); werr != err { //nolint:errorlint // the very same error value
			t.Errorf("%s: Wait = %v, Run %v", how, werr, err)
		}
		if len(ck.Pages()) != 0 {
			t.Errorf("%s: Pages() = %v after a failed dump", how, ck.Pages())
		}
		if f := fifos(images); len(f) > 0 {
			t.Errorf("%s: FIFOs left: %v", how, f)
		}
		e.checkRuns(id, cg)
	}
}

// TestCheckpointBackground: a background dump lets the container go once
// its memory is write-protected. Run returns while the sink has not stored
// a single page file (it never does: it blocks), and the container runs,
// thawed and traced by nobody, while its memory is still being written;
// Abort then ends the dump with the cause, and the container runs on.
func TestCheckpointBackground(t *testing.T) {
	e := newTestEnv(t)
	if !e.rt.BackgroundMemory() {
		t.Fatalf("criu %s has no --background-memory (vessel's patch 0012: run scripts/setup.sh)", e.rt.cfg.Criu)
	}
	id := "bg1"
	e.start(id, "/bin/sh", "-c", "x=$(yes | head -c 33554432); echo ready ${#x}; "+counterScript)
	waitFor(t, "the memory to be filled (log %q)", e.logContains(id, "ready 33554431"), func() any {
		b, _ := os.ReadFile(e.rt.LogPath(id))
		return string(b)
	})
	waitFor(t, "the counter to start", func() bool { return e.fileCount() >= 1 })
	cg := e.cgroup(id)

	sink := &blockingSink{started: make(chan struct{})}
	ck, err := e.rt.NewCheckpoint(t.Context(), id, CheckpointOptions{
		ImagePath: filepath.Join(e.dir, "ckpt-bg"), LeaveRunning: true, Pages: sink, Background: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Abort)
	if !ck.Background() {
		t.Fatal("not a background dump")
	}
	e.freeze(cg)
	if err := ck.Run(); err != nil {
		t.Fatal(err)
	}
	e.checkRuns(id, cg) // thaws: the counter counts while the dump waits on the sink
	ck.Abort()
	if err := ck.Wait(); !errors.Is(err, imgstream.ErrAborted) || !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("Wait after Abort = %v, want ErrCheckpoint and ErrAborted", err)
	}
	if len(ck.Pages()) != 0 {
		t.Errorf("Pages() = %v after an aborted dump", ck.Pages())
	}
	e.checkRuns(id, cg)
}

// TestCheckpointBackgroundDirect: with DirectPages CRIU writes the page
// images itself (patch 0041), with no FIFO: a finished dump's page files
// are regular, durable and named by Pages, and Written counts them; an
// Abort after the thaw stops CRIU's write through the abort pipe, the
// dump ends with ErrAborted and the container runs on.
func TestCheckpointBackgroundDirect(t *testing.T) {
	e := newTestEnv(t)
	if !e.rt.BackgroundMemory() || !e.rt.DirectWritePages() {
		t.Fatalf("criu %s has no --background-memory or --direct-write-pages (vessel's patches 0012, 0041: run scripts/setup.sh)", e.rt.cfg.Criu)
	}
	id := "bgd1"
	e.start(id, "/bin/sh", "-c", "x=$(yes | head -c 33554432); echo ready ${#x}; "+counterScript)
	waitFor(t, "the memory to be filled (log %q)", e.logContains(id, "ready 33554431"), func() any {
		b, _ := os.ReadFile(e.rt.LogPath(id))
		return string(b)
	})
	waitFor(t, "the counter to start", func() bool { return e.fileCount() >= 1 })
	cg := e.cgroup(id)

	// A whole dump: the page files are CRIU's, regular files.
	dir := filepath.Join(e.dir, "ckpt-bgd")
	sink := &blockingSink{started: make(chan struct{})} // never used
	ck, err := e.rt.NewCheckpoint(t.Context(), id, CheckpointOptions{
		ImagePath: dir, LeaveRunning: true, Pages: sink, Background: true, DirectPages: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Abort)
	e.freeze(cg)
	if err := ck.Run(); err != nil {
		t.Fatal(err)
	}
	e.checkRuns(id, cg)
	if err := ck.Wait(); err != nil {
		t.Fatal(err)
	}
	pages := ck.Pages()
	if len(pages) == 0 {
		t.Fatal("Pages() is empty after a direct dump")
	}
	var size int64
	for _, p := range pages {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("page file %s: %v, %v", p, fi, err)
		}
		size += fi.Size()
	}
	if size < 32<<20 || ck.Written() < 32<<20 {
		t.Errorf("page files %d bytes, Written %d: want the 32 MiB of memory at least", size, ck.Written())
	}
	select {
	case <-sink.started:
		t.Error("the sink was used")
	default:
	}

	// Aborted: the abort pipe hung up before the dump (what Abort does at
	// any time), so CRIU's first look after the thaw stops its write.
	ck2, err := e.rt.NewCheckpoint(t.Context(), id, CheckpointOptions{
		ImagePath: filepath.Join(e.dir, "ckpt-bgd2"), LeaveRunning: true, Background: true, DirectPages: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck2.Abort)
	ck2.bg.abort()
	e.freeze(cg)
	if err := ck2.Run(); err != nil {
		t.Fatal(err)
	}
	e.checkRuns(id, cg)
	if err := ck2.Wait(); !errors.Is(err, imgstream.ErrAborted) || !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("Wait after an abort = %v, want ErrCheckpoint and ErrAborted", err)
	}
	e.checkRuns(id, cg)
}

// TestCheckpointClose releases prepared checkpoints that never run, by
// Close and by Abort: the CRIU service exits and the FIFOs go.
func TestCheckpointClose(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "close1"
	e.start(id, "/bin/sh", "-c", counterScript)
	if n := len(criuChildren(t)); n != 0 {
		t.Fatalf("%d criu children before the test", n)
	}
	for _, how := range []string{"close", "abort", "lazy"} {
		images := filepath.Join(e.dir, "ckpt-"+how)
		o := CheckpointOptions{ImagePath: images, LeaveRunning: true, Pages: &imgstream.DirSink{Dir: images}, PageFiles: 3}
		o.Lazy = how == "lazy"
		ck, err := e.rt.NewCheckpoint(ctx, id, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ck.Abort)
		crius := criuChildren(t)
		if len(crius) != 1 {
			t.Fatalf("%s: criu children %v, want the prepared service", how, crius)
		}
		wantFifos := map[bool]int{false: 3, true: 0}[o.Lazy]
		if f := fifos(images); len(f) != wantFifos {
			t.Errorf("%s: FIFOs %v, want %d", how, f, wantFifos)
		}
		if how == "abort" {
			ck.Abort()
		} else {
			ck.Close()
		}
		ck.Close()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", crius[0])); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: criu %d still there (or unreaped): %v", how, crius[0], err)
		}
		if f := fifos(images); len(f) > 0 {
			t.Errorf("%s: FIFOs left: %v", how, f)
		}
		if err := ck.Run(); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: Run after Close = %v", how, err)
		}
		if err := ck.Wait(); err == nil {
			t.Errorf("%s: Wait of a closed checkpoint succeeded", how)
		}
	}
	// A cancelled context: nothing is prepared.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.rt.NewCheckpoint(cctx, id, CheckpointOptions{ImagePath: filepath.Join(e.dir, "ckpt-x"), LeaveRunning: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("NewCheckpoint with a cancelled context: %v", err)
	}
	if _, err := e.rt.NewCheckpoint(ctx, "nosuch", CheckpointOptions{ImagePath: filepath.Join(e.dir, "ckpt-y"), LeaveRunning: true}); !errors.Is(err, ErrNotFound) {
		t.Errorf("NewCheckpoint of an unknown container: %v", err)
	}
	if n := criuChildren(t); len(n) != 0 {
		t.Errorf("criu children left: %v", n)
	}
}

// criuTCPSockets returns the TCP sockets (inodes in /proc/net/tcp*) held by
// the processes tracing any of pids (CRIU).
func criuTCPSockets(t *testing.T, pids []int) []string {
	t.Helper()
	tcp := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(l); len(fs) > 9 {
				tcp[fs[9]] = true
			}
		}
	}
	var found []string
	tracers := map[string]bool{}
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				tracers[strings.TrimSpace(v)] = true
			}
		}
	}
	for tracer := range tracers {
		fds, _ := os.ReadDir("/proc/" + tracer + "/fd")
		for _, fd := range fds {
			l, _ := os.Readlink("/proc/" + tracer + "/fd/" + fd.Name())
			if ino, ok := strings.CutPrefix(l, "socket:["); ok && tcp[strings.TrimSuffix(ino, "]")] {
				found = append(found, l)
			}
		}
	}
	if len(tracers) == 0 {
		t.Error("no CRIU found tracing the container")
	}
	return found
}
