package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLazyPagesImagesLater starts `criu lazy-pages` before its images
// exist (CRIU patch 0027) and checks what the daemon does with the
// images-ready pipe: it waits on it, reads the images once told they are
// in (none here: it fails on the missing pstree, after the wait), and
// gives up when the pipe closes unsaid.
func TestLazyPagesImagesLater(t *testing.T) {
	e := newTestEnv(t)
	if !e.rt.LazyPagesEarly() {
		t.Skip("this criu has no --images-ready-fd (CRIU patch 0027): run make setup")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(name string) (*LazyPages, string) {
		images, work := filepath.Join(e.dir, name, "images"), filepath.Join(e.dir, name, "work")
		if err := os.MkdirAll(images, 0o700); err != nil {
			t.Fatal(err)
		}
		lp, err := e.rt.StartLazyPages(ctx, LazyPagesOptions{ImagePath: images, WorkPath: work, ImagesLater: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lp.Kill)
		return lp, work
	}
	waitLog := func(work, line string) {
		t.Helper()
		log := filepath.Join(work, "lazy-pages.log")
		for {
			b, _ := os.ReadFile(log)
			if strings.Contains(string(b), line) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("lazy-pages never logged %q: %s", line, b)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	// Told: it reads the images, which are not there.
	lp, work := start("told")
	waitLog(work, "Waiting for the images")
	select {
	case <-lp.Done():
		t.Fatalf("lazy-pages exited before it was told the images are in: %v", lp.Err())
	default:
	}
	if _, err := os.Stat(filepath.Join(work, "lazy-pages.socket")); err == nil {
		t.Fatal("lazy-pages listens for the restore before its images are in")
	}
	if err := lp.ImagesIn(); err != nil {
		t.Fatal(err)
	}
	if err := lp.WaitReady(ctx, work); err == nil {
		t.Fatal("lazy-pages was ready without a pstree image")
	}
	waitLog(work, "The images are ready")
	if err := lp.ImagesIn(); err == nil {
		t.Fatal("a second ImagesIn was taken")
	}

	// Closed unsaid (the move failed before its images came): it exits.
	lp, work = start("dropped")
	waitLog(work, "Waiting for the images")
	lp.closeImages()
	<-lp.Done()
	if lp.Err() == nil {
		t.Fatal("lazy-pages exited cleanly without its images")
	}
	waitLog(work, "closed without the images")

	// Killed while it waits: nothing is left.
	lp, work = start("killed")
	waitLog(work, "Waiting for the images")
	lp.Kill()
	if pids := criuChildren(t); len(pids) > 0 {
		t.Fatalf("criu processes left: %v", pids)
	}
}
