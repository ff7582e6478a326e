package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/imgstream"
)

// leaveStaleRoot makes what a daemon that died with a restore's root
// bound for CRIU leaves once its successor deleted the volume: a bind at
// the shim's criu-root whose root directory is gone.
func leaveStaleRoot(t *testing.T, e *testEnv, id string) string {
	t.Helper()
	gone := filepath.Join(e.dir, "deleted-volume-"+id)
	root := e.rt.criuRootDir(id)
	for _, d := range []string{gone, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(gone, root, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(root) })
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRestoreReplacesLeftoverRoot: a bind onto such a leftover fails
// with ENOENT (the next move's restore failed so, every time); the next
// restore's PrepareRoot replaces it, and the restored container runs.
func TestRestoreReplacesLeftoverRoot(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "lr1"
	bundle, exits := e.startCounter(id, 3)
	images := filepath.Join(e.dir, "ckpt")
	ck, err := e.rt.NewCheckpoint(ctx, id, CheckpointOptions{ImagePath: images, WorkPath: filepath.Join(e.dir, "ckpt-work"),
		Pages: &imgstream.DirSink{Dir: images}, LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Abort)
	e.freeze(e.cgroup(id))
	before := e.fileCount()
	if err := ck.Run(); err != nil {
		t.Fatal(err)
	}
	if err := ck.Wait(); err != nil {
		t.Fatal(err)
	}
	e.killDelete(id, exits)

	root := leaveStaleRoot(t, e, id)
	if err := unix.Mount(e.rootfs, root, "", unix.MS_BIND|unix.MS_REC, ""); !errors.Is(err, unix.ENOENT) {
		if err == nil {
			_ = unix.Unmount(root, unix.MNT_DETACH)
		}
		t.Fatalf("bind onto the leftover: %v, want ENOENT", err)
	}
	rst, err := e.rt.PrepareRestore(ctx, id, bundle, RestoreOptions{ImagePath: images, WorkPath: filepath.Join(e.dir, "restore-work")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rst.Abort)
	if err := rst.PrepareRoot(); err != nil {
		t.Fatalf("PrepareRoot over the leftover: %v", err)
	}
	p, err := rst.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.InitPid <= 0 {
		t.Fatalf("restored process %+v", p)
	}
	waitFor(t, "tick %d after restore", e.logContains(id, fmt.Sprintf("tick %d\n", before+1)), func() any { return before + 1 })
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CRIU's root after the restore: %v, want it gone", err)
	}
	if err := e.rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.checkGone(id)
}

// TestPrepareRootFailureUndone: a PrepareRoot that failed leaves nothing behind
// (no bind, the request as it was), so Run's own succeeds.
func TestPrepareRootFailureUndone(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := "lr3"
	images := filepath.Join(e.dir, "imgs")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := e.rt.prepareRestore(ctx, id, e.bundle(id, "/bin/true"), RestoreOptions{ImagePath: images, WorkPath: filepath.Join(e.dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Abort)
	base := len(p.opts.InheritFd)
	// No descriptors.json: the first attempt fails before the bind.
	if err := p.PrepareRoot(); err == nil {
		t.Fatal("PrepareRoot without descriptors.json succeeded")
	}
	if err := os.WriteFile(filepath.Join(images, "descriptors.json"), []byte(`["pipe:[1]","/dev/null","pipe:[2]"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second call is a no-op
		if err := p.PrepareRoot(); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(p.opts.InheritFd) - base; got != 2 {
		t.Errorf("the request inherits %d pipes, want 2", got)
	}
	if _, err := os.Stat(filepath.Join(p.criuRoot, "bin/sh")); err != nil {
		t.Errorf("CRIU's root not bound: %v", err)
	}
	p.releaseRoot()
	if len(p.opts.InheritFd) != base || p.opts.Root != nil {
		t.Errorf("released request keeps %d inherited fds (want %d), root %v", len(p.opts.InheritFd), base, p.opts.GetRoot())
	}
	if _, err := os.Stat(e.rt.criuRootDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CRIU's root after release: %v, want it gone", err)
	}
}

// TestDeleteLeftoverRoot: Delete and ReleaseRestoreRoot unbind a leftover
// root before anything removes the state directory: RemoveAll would
// reach through it into the container's volume.
func TestDeleteLeftoverRoot(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	for _, del := range []bool{true, false} {
		id := fmt.Sprintf("lr2%v", del)
		vol := filepath.Join(e.dir, "volume-"+id)
		keep := filepath.Join(vol, "keep")
		if err := os.MkdirAll(vol, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		root := e.rt.criuRootDir(id)
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(vol, root, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unmountAll(root) })
		if del {
			err := e.rt.Delete(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(e.rt.dir(id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state directory after Delete: %v", err)
			}
		} else {
			for range 2 {
				if err := e.rt.ReleaseRestoreRoot(id); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("mount point after ReleaseRestoreRoot: %v", err)
			}
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("the bound volume lost its file: %v", err)
		}
	}
}
