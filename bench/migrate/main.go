// Command migrate measures live migration between two test hosts on this
// machine (testhost.Cluster): for containers of several memory sizes, with
// memory being rewritten all the time, it moves each back and forth
// several times in every mode — cold (stop, move, start), live with
// --memory=copy (the in-run baseline: all memory copied while frozen) and
// live post-copy (lazy) — and records vessel's own per-phase report and
// the largest pause seen by a heartbeat inside the container. It prints
// JSON with medians.
//
//	go run ./bench/migrate -n 3 -sizes 0,512,2048
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Case is one (size, mode) series.
type Case struct {
	SizeMiB int    `json:"size_mib"`
	Mode    string `json:"mode"`
	// Security is "unprivileged" (the default) or "privileged".
	Security       string          `json:"security"`
	Moves          int             `json:"moves"`
	FrozenMs       benchutil.Stats `json:"frozen_ms"`
	HeartbeatGapMs benchutil.Stats `json:"heartbeat_gap_ms,omitzero"`
	TotalMs        benchutil.Stats `json:"total_ms"`
	SuspendDumpMs  benchutil.Stats `json:"suspend_dump_ms"`
	UndumpResumeMs benchutil.Stats `json:"undump_resume_ms"`
	PostcopyMs     benchutil.Stats `json:"postcopy_ms,omitzero"`
	// PullMBps is the post-copy page pull rate of each move: the bytes the
	// target pulled after the resume over the post-copy time, in MB/s
	// (10^6 bytes).
	PullMBps      benchutil.Stats       `json:"postcopy_pull_mb_per_s,omitzero"`
	PrecopyPasses benchutil.Stats       `json:"precopy_iterations"`
	DumpMiB       benchutil.Stats       `json:"copy_dump_mib"`
	Timings       []api.MigrationTiming `json:"timings"`
}

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark    string             `json:"benchmark"`
	Machine      benchutil.Machine  `json:"machine"`
	DirtyRateMiB int                `json:"dirty_rate_mib_per_s"`
	Cases        []Case             `json:"cases"`
	Ratios       map[string]float64 `json:"ratios"`
	Reference    map[string]float64 `json:"reference"`
}

func main() {
	n := flag.Int("n", 3, "moves per size and mode (alternating directions)")
	sizesFlag := flag.String("sizes", "0,512,2048", "container memory sizes in MiB (0: idle)")
	modesFlag := flag.String("modes", "cold,copy,lazy", "modes to measure")
	rate := flag.Int("rate", 64, "MiB/s of memory rewritten by the workload")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	secFlag := flag.String("security", "unprivileged", "container kinds, in turn: unprivileged, privileged (both: a same-run column)")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	beat := filepath.Join(bin, "beat")
	if err := testhost.BuildBeat(beat); err != nil {
		r.Fatalf("%v", err)
	}
	opts := testhost.ClusterOptions{StorageSizeMiB: 4096}
	if strings.Contains(*secFlag, "privileged") {
		// Privileged containers move only between hosts that accept them.
		opts.HostArgs = append(opts.HostArgs, "--accept-privileged")
	}
	c := testhost.NewCluster(r, bin, opts)

	res := Result{Benchmark: "migrate", Machine: benchutil.ThisMachine(), DirtyRateMiB: *rate,
		Ratios: map[string]float64{}, Reference: map[string]float64{
			"incus_6.0.4_frozen_ms": 430, "incus_6.0.4_wall_ms": 1430, "openvz_best_frozen_ms": 1380,
		}}
	secs := strings.Split(*secFlag, ",")
	for _, s := range strings.Split(*sizesFlag, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			r.Fatalf("bad size %q", s)
		}
		// One container per kind, moved in turn (each kind first every
		// other round): both meet the same machine.
		subjects := make([]*subject, len(secs))
		for k, sec := range secs {
			subjects[k] = launchSubject(r, c, sec, size)
			startBeat(r, c, "alpha", subjects[k].name, beat, size, *rate)
		}
		for _, mode := range strings.Split(*modesFlag, ",") {
			for _, sj := range subjects {
				sj.reset(Case{SizeMiB: size, Mode: mode, Security: sj.sec})
			}
			for i := 0; i < *n; i++ {
				for k := range subjects {
					sj := subjects[(i+k)%len(subjects)]
					sj.move(r, c, mode, beat, size, *rate)
					fmt.Fprintf(os.Stderr, "%s size %d MiB %s move %d: frozen %.0f ms, heartbeat gap %v, total %.0f ms%s\n",
						sj.sec, size, mode, i, sj.frozen[len(sj.frozen)-1], lastOr(sj.gap, mode), sj.total[len(sj.total)-1], sj.pullNote(mode))
				}
			}
			for _, sj := range subjects {
				res.Cases = append(res.Cases, sj.summary(mode, *n))
			}
		}
		for _, sj := range subjects {
			c.OK("delete", "--force", sj.at+":"+sj.name)
		}
	}
	// Post-copy against the in-run baseline (copy), per size; each kind
	// against privileged containers.
	for _, a := range res.Cases {
		for _, b := range res.Cases {
			same := a.SizeMiB == b.SizeMiB
			if same && a.Security == b.Security && a.Mode == api.MemoryLazy && b.Mode == api.MemoryCopy {
				res.Ratios[fmt.Sprintf("lazy_vs_copy_frozen_%dmib_%s", a.SizeMiB, a.Security)] = benchutil.Ratio(a.FrozenMs.Median, b.FrozenMs.Median)
			}
			if same && a.Mode == b.Mode && a.Security == "unprivileged" && b.Security == "privileged" {
				res.Ratios[fmt.Sprintf("unprivileged_vs_privileged_frozen_%s_%dmib", a.Mode, a.SizeMiB)] = benchutil.Ratio(a.FrozenMs.Median, b.FrozenMs.Median)
			}
		}
	}
	benchutil.Emit(r, res, *out)
}

func lastOr(v []float64, mode string) string {
	if mode == "cold" || len(v) == 0 {
		return "n/a (restarted)"
	}
	return fmt.Sprintf("%.0f ms", v[len(v)-1])
}

// startBeat installs and starts the heartbeat workload in the container.
func startBeat(r *testhost.Runner, c *testhost.Cluster, host, name, beat string, mib, rate int) {
	c.Host(host).Install(name, beat)
	c.OK("exec", host+":"+name, "--", "sh", "-c",
		fmt.Sprintf("rm -f /tmp/beat.ready; setsid beat %d %d </dev/null >/dev/null 2>&1 &", mib, rate))
	c.OK("exec", host+":"+name, "--", "sh", "-c", "while [ ! -e /tmp/beat.ready ]; do usleep 50000; done")
}

// subject is one container a run moves back and forth, and its samples.
type subject struct {
	sec, name, at                                        string
	cs                                                   Case
	frozen, gap, total, sd, ur, post, pull, passes, dump []float64
}

// launchSubject launches the container of one kind (security) and size.
func launchSubject(r *testhost.Runner, c *testhost.Cluster, sec string, size int) *subject {
	sj := &subject{sec: sec, name: fmt.Sprintf("mig%d", size), at: "alpha"}
	var config []string
	switch sec {
	case "unprivileged":
	case "privileged":
		sj.name += "p"
		config = []string{"-c", "security.privileged=true"}
	default:
		r.Fatalf("bad -security %q", sec)
	}
	c.OK(append([]string{"launch", "busybox", "alpha:" + sj.name}, config...)...)
	return sj
}

func (sj *subject) reset(cs Case) {
	*sj = subject{sec: sj.sec, name: sj.name, at: sj.at, cs: cs}
}

// move moves the container to the other host and records the timing.
func (sj *subject) move(r *testhost.Runner, c *testhost.Cluster, mode, beat string, size, rate int) {
	to := map[string]string{"alpha": "beta", "beta": "alpha"}[sj.at]
	args := []string{"move", sj.at + ":" + sj.name, to + ":", "--format", "json"}
	if mode != "cold" {
		args = append(args, "--live", "--memory", mode)
		c.OK("exec", sj.at+":"+sj.name, "--", "touch", "/tmp/beat.reset")
		time.Sleep(300 * time.Millisecond) // let it take the reset, then tick normally
	}
	var t api.MigrationTiming
	if err := json.Unmarshal([]byte(c.OK(args...)), &t); err != nil {
		r.Fatalf("timing: %v", err)
	}
	sj.at = to
	if mode == "cold" {
		startBeat(r, c, sj.at, sj.name, beat, size, rate) // a cold move restarts it
	} else {
		time.Sleep(200 * time.Millisecond)
		us, _ := strconv.Atoi(strings.TrimSpace(c.OK("exec", sj.at+":"+sj.name, "--", "cat", "/tmp/beat.max")))
		sj.gap = append(sj.gap, float64(us)/1000)
	}
	sj.cs.Timings = append(sj.cs.Timings, t)
	sj.frozen = append(sj.frozen, t.FrozenTotal*1000)
	sj.total = append(sj.total, t.Total*1000)
	sj.sd = append(sj.sd, t.SuspendDump*1000)
	sj.ur = append(sj.ur, t.UndumpResume*1000)
	sj.post = append(sj.post, t.Postcopy*1000)
	if t.Postcopy > 0 {
		sj.pull = append(sj.pull, float64(t.PostcopyBytes)/t.Postcopy/1e6)
	}
	sj.passes = append(sj.passes, float64(t.PrecopyIterations))
	sj.dump = append(sj.dump, float64(t.DumpBytes)/(1<<20))
}

// pullNote describes the last move's post-copy pull, for the progress line.
func (sj *subject) pullNote(mode string) string {
	if mode != api.MemoryLazy || len(sj.pull) == 0 {
		return ""
	}
	t := sj.cs.Timings[len(sj.cs.Timings)-1]
	return fmt.Sprintf(", post-copy %.0f ms %.0f MiB (%.0f MB/s)", t.Postcopy*1000, float64(t.PostcopyBytes)/(1<<20), sj.pull[len(sj.pull)-1])
}

// summary is the case of mode over the moves recorded since reset.
func (sj *subject) summary(mode string, n int) Case {
	cs := sj.cs
	cs.Moves = n
	cs.FrozenMs, cs.TotalMs = benchutil.Summarise(sj.frozen), benchutil.Summarise(sj.total)
	cs.SuspendDumpMs, cs.UndumpResumeMs = benchutil.Summarise(sj.sd), benchutil.Summarise(sj.ur)
	cs.PrecopyPasses, cs.DumpMiB = benchutil.Summarise(sj.passes), benchutil.Summarise(sj.dump)
	if mode == api.MemoryLazy {
		cs.PostcopyMs = benchutil.Summarise(sj.post)
		cs.PullMBps = benchutil.Summarise(sj.pull)
	}
	if len(sj.gap) > 0 {
		cs.HeartbeatGapMs = benchutil.Summarise(sj.gap)
	}
	return cs
}
