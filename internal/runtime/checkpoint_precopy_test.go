package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// TestCheckpointPrecopy pre-dumps a running container twice, then dumps
// it frozen with its parent images, kills it and restores it from the
// chain of three directories: it counts on from where it was. The passes
// after the first write only what changed (the counter's shell, its
// tracked memory mostly untouched): the final dump has fewer bytes than
// the first pass and leaves pages to its parents.
func TestCheckpointPrecopy(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "pc1"
	bundle, exits := e.startCounter(id, 3)
	images, work := filepath.Join(e.dir, "ckpt"), filepath.Join(e.dir, "ckpt-work")
	ck, err := e.rt.NewCheckpoint(ctx, id, CheckpointOptions{
		ImagePath: images, WorkPath: work, LeaveRunning: true, Pages: &imgstream.DirSink{Dir: images},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Abort)
	var passes []int64
	for i := 1; i <= 2; i++ {
		n, err := ck.PreDump(filepath.Join(e.dir, fmt.Sprintf("pre-%d", i)))
		if err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		passes = append(passes, n)
	}
	if _, err := ck.PreDump(filepath.Join(e.dir, "elsewhere", "pre-3")); err == nil {
		t.Error("a pass outside the images' directory was taken")
	}
	cg := e.cgroup(id)
	e.freeze(cg)
	before := e.fileCount()
	if err := ck.Run(); err != nil {
		t.Fatal(err)
	}
	final, err := pageBytes(images)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page bytes: passes %v, final %d", passes, final)
	// The counter's shell forks a new sleep every tick (a new task's
	// memory is all written, so the totals depend on the ticks between
	// passes); the shell itself, the tree's init, lives through all of
	// them, rewriting most of its few pages every tick (stack, heap) but
	// not all: the final dump leaves the untouched ones to the passes (a
	// dump without tracking holds them all itself).
	if passes[0] == 0 {
		t.Errorf("page bytes: passes %v: the first pass wrote nothing", passes)
	}
	inParent, own := initPagemap(t, images)
	t.Logf("init's pages in the final dump: %d left to the passes, %d its own", inParent, own)
	if inParent == 0 {
		t.Errorf("the final dump of init is not incremental: %d pages in its parents, %d its own", inParent, own)
	}
	if _, err := ck.PreDump(filepath.Join(e.dir, "pre-late")); err == nil {
		t.Error("a pre-dump after Run was taken")
	}
	if l, err := os.Readlink(filepath.Join(images, "parent")); err != nil || l != "../pre-2" {
		t.Errorf("parent link %q %v", l, err)
	}
	e.killDelete(id, exits)
	p, err := e.rt.Restore(ctx, id, bundle, RestoreOptions{ImagePath: images, WorkPath: filepath.Join(e.dir, "restore-work")})
	if err != nil {
		t.Fatal(err)
	}
	if p.InitPid <= 0 {
		t.Fatalf("restored process %+v", p)
	}
	waitFor(t, "tick %d after restore", e.logContains(id, fmt.Sprintf("tick %d\n", before+1)), func() any { return before + 1 })
	// CRIU's log counts the pages left to the parent: "N holes".
	if b, err := os.ReadFile(filepath.Join(work, "dump.log")); err != nil || !regexp.MustCompile(`[1-9][0-9]* holes`).Match(b) {
		t.Errorf("the final dump left no page to its parent (%v)", err)
	}
	if err := e.rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.checkGone(id)
}

// initPagemap counts the pages of the dumped tree's init (the lowest
// pagemap-N.img) that a dump leaves to its parent images and those it
// holds itself.
func initPagemap(t *testing.T, dir string) (inParent, own uint32) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "pagemap-*.img"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pagemap in %s: %v", dir, err)
	}
	lowest, pid := "", -1
	for _, f := range files {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(f), "pagemap-%d.img", &n); err == nil && (pid < 0 || n < pid) {
			lowest, pid = f, n
		}
	}
	f, err := os.Open(lowest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, false).Decode(&pagemap.PagemapEntry{})
	if err != nil {
		t.Fatalf("decode %s: %v", lowest, err)
	}
	const pageInParent = 1 // CRIU's PE_PARENT
	for _, e := range img.Entries {
		pe, ok := e.Message.(*pagemap.PagemapEntry)
		if !ok {
			continue // the head
		}
		if pe.GetFlags()&pageInParent != 0 {
			inParent += pe.GetNrPages()
		} else {
			own += pe.GetNrPages()
		}
	}
	return inParent, own
}
