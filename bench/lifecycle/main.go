// Command lifecycle measures vessel's launch-to-running and stop+delete
// latency over N containers (unprivileged, the default, and interleaved
// with them as many privileged ones), and, in the same run and interleaved with it,
// `runc run -d` / kill+delete of an equivalent bundle (same generated spec,
// a btrfs snapshot of the same image on the same pool). It prints JSON.
//
//	go run ./bench/lifecycle -n 20
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark string            `json:"benchmark"`
	Machine   benchutil.Machine `json:"machine"`
	N         int               `json:"n"`
	Vessel    struct {
		LaunchMs       benchutil.Stats `json:"launch_ms"`
		StopDeleteMs   benchutil.Stats `json:"stop_force_delete_ms"`
		GracefulStopMs benchutil.Stats `json:"graceful_stop_ms"`
		// The same with security.privileged=true (no user namespace).
		PrivilegedLaunchMs     benchutil.Stats `json:"privileged_launch_ms"`
		PrivilegedStopDeleteMs benchutil.Stats `json:"privileged_stop_force_delete_ms"`
	} `json:"vessel"`
	Runc struct {
		RunMs        benchutil.Stats `json:"run_ms"`
		KillDeleteMs benchutil.Stats `json:"kill_delete_ms"`
	} `json:"runc"`
	Ratios struct {
		LaunchVsRunc     float64 `json:"launch_vs_runc"`
		StopDeleteVsRunc float64 `json:"stop_delete_vs_runc"`
		// Unprivileged launch over privileged launch (medians).
		UnprivilegedVsPrivileged float64 `json:"unprivileged_vs_privileged_launch"`
	} `json:"ratios"`
	Reference map[string]float64 `json:"reference"`
}

func main() {
	n := flag.Int("n", 20, "containers to launch")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	h := testhost.New(r, bin, testhost.Options{StorageSizeMiB: 4096})

	// Warm-up: the first launch unpacks the image into its volume.
	h.OK("launch", "busybox", "warmup")
	h.OK("delete", "--force", "warmup")
	rb := newRuncBench(r, h)

	var res Result
	res.Benchmark, res.Machine, res.N = "lifecycle", benchutil.ThisMachine(), *n
	var launch, stopDel, runcRun, runcKill, graceful, launchP, stopDelP []float64
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("lc%d", i)
		// Alternate which kind goes first: neither gets a warmer host.
		for k := range 2 {
			if (i+k)%2 == 0 {
				t0 := time.Now()
				h.OK("launch", "busybox", name)
				launch = append(launch, benchutil.Ms(time.Since(t0)))
			} else {
				t0 := time.Now()
				h.OK("launch", "busybox", name+"p", "-c", "security.privileged=true")
				launchP = append(launchP, benchutil.Ms(time.Since(t0)))
			}
		}

		d, err := rb.run(i)
		if err != nil {
			r.Fatalf("runc run: %v", err)
		}
		runcRun = append(runcRun, benchutil.Ms(d))
	}
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("lc%d", i)
		if i < 3 {
			// A few graceful stops: busybox init's own shutdown path.
			t0 := time.Now()
			h.OK("stop", name)
			graceful = append(graceful, benchutil.Ms(time.Since(t0)))
			h.OK("start", name)
		}
		t0 := time.Now()
		h.OK("stop", "--force", name)
		h.OK("delete", name)
		stopDel = append(stopDel, benchutil.Ms(time.Since(t0)))
		t0 = time.Now()
		h.OK("stop", "--force", name+"p")
		h.OK("delete", name+"p")
		stopDelP = append(stopDelP, benchutil.Ms(time.Since(t0)))

		d, err := rb.killDelete(i)
		if err != nil {
			r.Fatalf("runc kill/delete: %v", err)
		}
		runcKill = append(runcKill, benchutil.Ms(d))
	}
	res.Vessel.LaunchMs = benchutil.Summarise(launch)
	res.Vessel.StopDeleteMs = benchutil.Summarise(stopDel)
	res.Vessel.GracefulStopMs = benchutil.Summarise(graceful)
	res.Vessel.PrivilegedLaunchMs = benchutil.Summarise(launchP)
	res.Vessel.PrivilegedStopDeleteMs = benchutil.Summarise(stopDelP)
	res.Runc.RunMs = benchutil.Summarise(runcRun)
	res.Runc.KillDeleteMs = benchutil.Summarise(runcKill)
	res.Ratios.LaunchVsRunc = benchutil.Ratio(res.Vessel.LaunchMs.Median, res.Runc.RunMs.Median)
	res.Ratios.StopDeleteVsRunc = benchutil.Ratio(res.Vessel.StopDeleteMs.Median, res.Runc.KillDeleteMs.Median)
	res.Ratios.UnprivilegedVsPrivileged = benchutil.Ratio(res.Vessel.LaunchMs.Median, res.Vessel.PrivilegedLaunchMs.Median)
	res.Reference = map[string]float64{"incus_6.0.4_launch_ms": 212}

	benchutil.Emit(r, res, *out)
}

// runcBench runs equivalent bundles with runc directly.
type runcBench struct {
	r     *testhost.Runner
	h     *testhost.Host
	dir   string
	root  string
	image string
	spec  runtime.SpecOptions
}

func newRuncBench(r *testhost.Runner, h *testhost.Host) *runcBench {
	var img api.Image
	if err := json.Unmarshal([]byte(h.OK("image", "info", "busybox", "--format", "json")), &img); err != nil {
		r.Fatalf("%v", err)
	}
	pool := filepath.Join(h.Root(), "storage-pools", "default")
	b := &runcBench{
		r: r, h: h,
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

// run prepares bundle i (not timed: a snapshot, like vessel's clone, plus
// the spec) and times `runc run -d`.
func (b *runcBench) run(i int) (time.Duration, error) {
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

// killDelete times `runc kill KILL`, waiting for the stop, and `runc delete`.
func (b *runcBench) killDelete(i int) (time.Duration, error) {
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
