// Package floor measures, in a benchmark's own run, what vessel's figures
// are to be read against: the same work done by the underlying tools with
// nothing of vessel around them. Runc is `runc run -d` and kill+delete of
// a bundle equivalent to a vessel container; CRIU is a dump and a restore
// of a trivial process.
package floor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Runc runs bundles equivalent to host h's busybox containers (same
// generated spec, a btrfs snapshot of the same image on the same pool)
// with runc directly. h must have the busybox image; its pool must be
// btrfs.
type Runc struct {
	h     *testhost.Host
	dir   string
	root  string
	image string
	spec  runtime.SpecOptions
}

// NewRunc prepares the runc floor on h; the runner's cleanup removes what
// it leaves.
func NewRunc(r *testhost.Runner, h *testhost.Host) *Runc {
	var img api.Image
	if err := json.Unmarshal([]byte(h.OK("image", "info", "busybox", "--format", "json")), &img); err != nil {
		r.Fatalf("%v", err)
	}
	pool := filepath.Join(h.Root(), "storage-pools", "default")
	b := &Runc{
		h:     h,
		dir:   filepath.Join(pool, "runc-bench"),
		root:  filepath.Join(h.RunDir(), "runc-bench"),
		image: filepath.Join(pool, "images", img.Fingerprint),
		spec:  runtime.SpecOptions{Args: img.Init, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}},
	}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		r.Fatalf("%v", err)
	}
	r.Cleanup(func() {
		out, _ := exec.Command(runtime.DefaultRuncPath(), "--root", b.root, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runtime.DefaultRuncPath(), "--root", b.root, "delete", "--force", id).Run()
		}
		matches, _ := filepath.Glob(filepath.Join(b.dir, "*", "rootfs"))
		for _, m := range matches {
			_ = exec.Command("btrfs", "subvolume", "delete", m).Run()
		}
		os.RemoveAll(b.dir)
		os.RemoveAll(b.root)
	})
	return b
}

// Run prepares bundle i (not timed: a snapshot, like vessel's clone, plus
// the spec) and times `runc run -d`.
func (b *Runc) Run(i int) (time.Duration, error) {
	id := fmt.Sprintf("rb%d", i)
	bundle := filepath.Join(b.dir, id)
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return 0, err
	}
	rootfs := filepath.Join(bundle, "rootfs")
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", b.image, rootfs).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("snapshot: %w: %s", err, out)
	}
	o := b.spec
	o.ID, o.Hostname, o.Rootfs = id, id, rootfs
	o.CgroupsPath = b.h.CgroupParent() + "/" + id
	spec, err := runtime.GenerateSpec(o)
	if err != nil {
		return 0, err
	}
	if err := runtime.WriteBundle(bundle, spec); err != nil {
		return 0, err
	}
	// runc run -d hands its stdio to the container's init: give it
	// /dev/null, not pipes we would wait on forever.
	t0 := time.Now()
	cmd := exec.Command(runtime.DefaultRuncPath(), "--root", b.root, "run", "-d", "--bundle", bundle, id)
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("runc run %s: %w", id, err)
	}
	return time.Since(t0), nil
}

// KillDelete times `runc kill KILL` of bundle i's container, waiting for
// the stop, and `runc delete`, then removes the bundle's snapshot.
func (b *Runc) KillDelete(i int) (time.Duration, error) {
	id := fmt.Sprintf("rb%d", i)
	t0 := time.Now()
	if out, err := exec.Command(runtime.DefaultRuncPath(), "--root", b.root, "kill", id, "KILL").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("kill: %w: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, runtime.DefaultRuncPath(), "--root", b.root, "state", id).Output()
		var st struct{ Status string }
		if err == nil && json.Unmarshal(out, &st) == nil && st.Status == "stopped" {
			break
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%s did not stop", id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if out, err := exec.Command(runtime.DefaultRuncPath(), "--root", b.root, "delete", id).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("delete: %w: %s", err, out)
	}
	d := time.Since(t0)
	_ = exec.Command("btrfs", "subvolume", "delete", filepath.Join(b.dir, id, "rootfs")).Run()
	return d, nil
}
