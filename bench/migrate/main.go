// Command migrate measures live migration between two test hosts on this
// machine (testhost.Cluster): for containers of several memory sizes, with
// memory being rewritten all the time, it moves each back and forth
// several times in every mode — cold (stop, move, start), live with
// --memory=copy (the in-run baseline: all memory copied while frozen),
// live post-copy (lazy) and live pre-copy (precopy: memory passes while it
// runs) — and records vessel's own per-phase report, the
// largest pause seen by a heartbeat inside the container, and the largest
// gap between the answers a client on the hosts' segment (another network
// namespace, testhost.Cluster's client) gets from a UDP echo server in the
// container, to a request every millisecond: the service's downtime seen
// from outside. Beside them, in the same run, one sample per move of two
// floors (bench/internal/floor): `runc run -d` of a trivial container and
// a CRIU dump and restore of a trivial process. It prints JSON with
// medians and p90. With -criu-b, every kind gets a second container moved
// in turn with the first, whose moves run that other CRIU build (cases
// with "criu": "b"): a same-run, interleaved A/B of a CRIU change. The
// daemons run the criu of a symlink the benchmark points at A (the
// default criu) or B before each move; both builds must take the same
// options and images, and should share CRIU's kernel-probe cache: build
// them with the same RUNDIR (setup's: /dev/shm where /run is no tmpfs) and
// the same SOURCE_DATE_EPOCH, which CRIU stamps into the cache. Otherwise
// each finds the other's cache stale and probes the kernel again (~20 ms,
// partly inside the frozen window); put a rebuilt A first in PATH.
//
//	go run ./bench/migrate -n 20 -sizes 0 -modes copy,lazy
//	go run ./bench/migrate -n 20 -sizes 0 -modes copy -criu-b /path/to/other/criu
//	go run ./bench/migrate -n 10 -sizes 0,2048 -modes copy,lazy,precopy
//	go run ./bench/migrate -kind vm -n 10 -modes copy,lazy   # an idle VM (vm.go)
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/floor"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Case is one (size, mode) series.
type Case struct {
	SizeMiB int    `json:"size_mib"`
	Mode    string `json:"mode"`
	// Security is "unprivileged" (the default) or "privileged".
	Security string `json:"security"`
	// Criu is "b" for the moves made with -criu-b's build, else empty.
	Criu           string          `json:"criu,omitempty"`
	Moves          int             `json:"moves"`
	FrozenMs       benchutil.Stats `json:"frozen_ms"`
	HeartbeatGapMs benchutil.Stats `json:"heartbeat_gap_ms,omitzero"`
	// ClientGapMs is the largest gap between two answers the outside
	// client got, per live move (ClientGapsMs lists them in order).
	ClientGapMs    benchutil.Stats `json:"client_gap_ms,omitzero"`
	ClientGapsMs   []float64       `json:"client_gaps_ms,omitempty"`
	TotalMs        benchutil.Stats `json:"total_ms"`
	SuspendDumpMs  benchutil.Stats `json:"suspend_dump_ms"`
	UndumpResumeMs benchutil.Stats `json:"undump_resume_ms"`
	// ResumeReportMs is the target's bookkeeping after the tasks resumed,
	// until it answered (not in FrozenMs).
	ResumeReportMs benchutil.Stats `json:"resume_report_ms,omitzero"`
	PostcopyMs     benchutil.Stats `json:"postcopy_ms,omitzero"`
	// PullMBps is the post-copy page pull rate of each move: the bytes the
	// target pulled after the resume over the post-copy time, in MB/s
	// (10^6 bytes).
	PullMBps      benchutil.Stats `json:"postcopy_pull_mb_per_s,omitzero"`
	PrecopyPasses benchutil.Stats `json:"precopy_iterations"`
	// MemoryPasses is the number of memory passes of each pre-copy move
	// (--memory=precopy), MemoryPassMiB the MiB of each pass, per move.
	MemoryPasses  benchutil.Stats       `json:"memory_passes,omitzero"`
	MemoryPassMiB [][]float64           `json:"memory_pass_mib,omitempty"`
	DumpMiB       benchutil.Stats       `json:"copy_dump_mib"`
	Timings       []api.MigrationTiming `json:"timings"`
}

// Floor is what the underlying tools take on this machine in this run,
// one sample after each move.
type Floor struct {
	// RuncRunMs is `runc run -d` of a busybox bundle like vessel's.
	RuncRunMs benchutil.Stats `json:"runc_run_ms"`
	// CriuDumpMs and CriuRestoreMs are CRIU dumping and restoring a
	// trivial process (sleep) through its RPC service.
	CriuDumpMs    benchutil.Stats `json:"criu_dump_ms"`
	CriuRestoreMs benchutil.Stats `json:"criu_restore_ms"`
}

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark    string             `json:"benchmark"`
	Machine      benchutil.Machine  `json:"machine"`
	DirtyRateMiB int                `json:"dirty_rate_mib_per_s"`
	Cases        []Case             `json:"cases"`
	Floor        Floor              `json:"floor"`
	Ratios       map[string]float64 `json:"ratios"`
	Reference    map[string]float64 `json:"reference"`
}

func main() {
	n := flag.Int("n", 20, "moves per size and mode (alternating directions)")
	sizesFlag := flag.String("sizes", "0,512,2048", "container memory sizes in MiB (0: idle)")
	modesFlag := flag.String("modes", "cold,copy,lazy", "modes to measure")
	rate := flag.Int("rate", 64, "MiB/s of memory rewritten by the workload")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	secFlag := flag.String("security", "unprivileged", "container kinds, in turn: unprivileged, privileged (both: a same-run column)")
	kind := flag.String("kind", "container", "container, or vm: an idle VM of -vm-mib moved in -modes (copy, lazy, auto; vm.go)")
	vmMiB := flag.Int("vm-mib", 256, "the VM's memory (-kind vm)")
	vmDirty := flag.Int("vm-dirty-mib", 0, "memory the VM's heartbeat holds and rewrites at -rate MiB/s (-kind vm; 0: idle)")
	vmFaults := flag.String("vm-faults", "", "-kind vm: POINT=ACTION[,...] vesseld --fault for both hosts, the whole run (an A/B arm: migrate.vm.target.claim=fail,migrate.vm.source.watch=fail is vessel before either change)")
	vmTraceDir := flag.String("vm-trace", "", "-kind vm: write tcpdump -tt of both hosts and the segment around each move, the bridges' forwarding entries and the daemons' logs here (vmtrace.go)")
	criuBFlag := flag.String("criu-b", "", "a second criu binary: each kind gets a second container, moved in turn with the first, with this criu (cases \"criu\": \"b\"): a same-run A/B")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	beat := filepath.Join(bin, "beat")
	if err := testhost.BuildBeat(beat); err != nil {
		r.Fatalf("%v", err)
	}
	echo := filepath.Join(bin, "udpecho")
	if err := testhost.BuildUDPEcho(echo); err != nil {
		r.Fatalf("%v", err)
	}
	opts := testhost.ClusterOptions{StorageSizeMiB: 4096}
	if strings.Contains(*secFlag, "privileged") {
		// Privileged containers move only between hosts that accept them.
		opts.HostArgs = append(opts.HostArgs, "--accept-privileged")
	}
	for _, f := range strings.Split(*vmFaults, ",") {
		if f != "" {
			opts.HostArgs = append(opts.HostArgs, "--fault", f)
		}
	}
	var sel *criuSelector
	if *criuBFlag != "" {
		sel = newCriuSelector(r, bin, *criuBFlag)
		opts.HostArgs = append(opts.HostArgs, "--criu", sel.link)
	}
	c := testhost.NewCluster(r, bin, opts)

	res := Result{Benchmark: "migrate", Machine: benchutil.ThisMachine(), DirtyRateMiB: *rate,
		Ratios: map[string]float64{}, Reference: map[string]float64{
			"incus_6.0.4_frozen_ms": 430, "incus_6.0.4_wall_ms": 1430, "openvz_best_frozen_ms": 1380,
		}}
	fl := &floors{r: r, dir: filepath.Join(bin, "criu-floor")}
	if *kind == "vm" {
		benchutil.Emit(r, runVM(r, c, fl, *n, vmLoad{MiB: *vmMiB, DirtyMiB: *vmDirty, Rate: *rate}, strings.Split(*modesFlag, ","), beat, echo, *vmTraceDir, *vmFaults), *out)
		return
	}
	secs := strings.Split(*secFlag, ",")
	for _, s := range strings.Split(*sizesFlag, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			r.Fatalf("bad size %q", s)
		}
		// One container per kind, moved in turn (each kind first every
		// other round): both meet the same machine.
		var subjects []*subject
		for _, sec := range secs {
			subjects = append(subjects, launchSubject(r, c, sec, size, ""))
			if sel != nil {
				subjects = append(subjects, launchSubject(r, c, sec, size, "b"))
			}
		}
		for _, sj := range subjects {
			startBeat(r, c, "alpha", sj.name, beat, size, *rate)
			startEcho(c, "alpha", sj.name, echo)
			sj.client = startClient(r, c, echo, sj.name)
		}
		if fl.runc == nil { // the busybox image is on alpha now
			fl.runc = floor.NewRunc(r, c.Host("alpha"))
		}
		for _, mode := range strings.Split(*modesFlag, ",") {
			for _, sj := range subjects {
				sj.reset(Case{SizeMiB: size, Mode: mode, Security: sj.sec, Criu: sj.criu})
			}
			for i := 0; i < *n; i++ {
				for k := range subjects {
					sj := subjects[(i+k)%len(subjects)]
					sel.use(sj.criu)
					sj.move(r, c, mode, beat, echo, size, *rate)
					fmt.Fprintf(os.Stderr, "%s%s size %d MiB %s move %d: frozen %.0f ms, heartbeat gap %v, client gap %v, total %.0f ms%s\n",
						sj.sec, criuNote(sj.criu), size, mode, i, sj.frozen[len(sj.frozen)-1], lastOr(sj.gap, mode), lastOr(sj.clientGap, mode), sj.total[len(sj.total)-1], sj.pullNote(mode))
					fl.sample()
				}
			}
			for _, sj := range subjects {
				res.Cases = append(res.Cases, sj.summary(mode, *n))
			}
		}
		for _, sj := range subjects {
			sj.client.close()
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
			if same && a.Security == b.Security && a.Mode == api.MemoryPrecopy && (b.Mode == api.MemoryCopy || b.Mode == api.MemoryLazy) {
				res.Ratios[fmt.Sprintf("precopy_vs_%s_frozen_%dmib_%s", b.Mode, a.SizeMiB, a.Security)] = benchutil.Ratio(a.FrozenMs.Median, b.FrozenMs.Median)
			}
			if same && a.Mode == b.Mode && a.Security == b.Security && a.Criu == "b" && b.Criu == "" {
				res.Ratios[fmt.Sprintf("criu_b_vs_a_frozen_%s_%dmib_%s", a.Mode, a.SizeMiB, a.Security)] = benchutil.Ratio(a.FrozenMs.Median, b.FrozenMs.Median)
			}
			if same && a.Mode == b.Mode && a.Criu == b.Criu && a.Security == "unprivileged" && b.Security == "privileged" {
				res.Ratios[fmt.Sprintf("unprivileged_vs_privileged_frozen_%s_%dmib", a.Mode, a.SizeMiB)] = benchutil.Ratio(a.FrozenMs.Median, b.FrozenMs.Median)
			}
		}
	}
	res.Floor = Floor{RuncRunMs: benchutil.Summarise(fl.runcRun),
		CriuDumpMs: benchutil.Summarise(fl.criuDump), CriuRestoreMs: benchutil.Summarise(fl.criuRestore)}
	benchutil.Emit(r, res, *out)
}

// floors takes the same-run floor samples.
type floors struct {
	r                              *testhost.Runner
	runc                           *floor.Runc
	dir                            string
	i                              int
	runcRun, criuDump, criuRestore []float64
}

// sample takes one sample of each floor.
func (f *floors) sample() {
	d, err := f.runc.Run(f.i)
	if err != nil {
		f.r.Fatalf("runc floor: %v", err)
	}
	if _, err := f.runc.KillDelete(f.i); err != nil {
		f.r.Fatalf("runc floor: %v", err)
	}
	f.i++
	f.runcRun = append(f.runcRun, benchutil.Ms(d))
	dump, restore, err := floor.CRIU(f.dir)
	if err != nil {
		f.r.Fatalf("CRIU floor: %v", err)
	}
	f.criuDump = append(f.criuDump, benchutil.Ms(dump))
	f.criuRestore = append(f.criuRestore, benchutil.Ms(restore))
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

// echoPort is the UDP port of the echo server in the containers.
const echoPort = "7007"

// startEcho installs and starts the UDP echo server in the container.
func startEcho(c *testhost.Cluster, host, name, echo string) {
	c.Host(host).Install(name, echo)
	c.OK("exec", host+":"+name, "--", "sh", "-c",
		"rm -f /tmp/udpecho.ready; setsid udpecho serve "+echoPort+" /tmp/udpecho.ready </dev/null >/dev/null 2>&1 &")
	c.OK("exec", host+":"+name, "--", "sh", "-c", "while [ ! -e /tmp/udpecho.ready ]; do usleep 50000; done")
}

// client is udpecho's probe, in the cluster's client netns, sending to
// one container every millisecond.
type client struct {
	r    *testhost.Runner
	in   io.WriteCloser
	out  *bufio.Reader
	wait func() error
}

// startClient starts the probe of container name (on alpha) and waits
// until it gets answers.
func startClient(r *testhost.Runner, c *testhost.Cluster, echo, name string) *client {
	var inst api.Instance
	if err := json.Unmarshal([]byte(c.OK("info", "alpha:"+name, "--format", "json")), &inst); err != nil {
		r.Fatalf("info %s: %v", name, err)
	}
	cmd := c.ClientCommand(echo, "probe", inst.IPv4, echoPort)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		r.Fatalf("%v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.Fatalf("%v", err)
	}
	if err := cmd.Start(); err != nil {
		r.Fatalf("start the client: %v", err)
	}
	cl := &client{r: r, in: in, out: bufio.NewReader(out), wait: cmd.Wait}
	r.Cleanup(cl.close)
	if _, ok := cl.waitAnswers(5 * time.Second); !ok {
		r.Fatalf("the client gets no answer from %s at %s", name, inst.IPv4)
	}
	return cl
}

// query returns the largest gap between answers since the last reset,
// the time since the last answer, and how many answers came.
func (cl *client) query() (gap, since time.Duration, replies int) {
	if _, err := io.WriteString(cl.in, "q\n"); err != nil {
		cl.r.Fatalf("client: %v", err)
	}
	line, err := cl.out.ReadString('\n')
	if err != nil {
		cl.r.Fatalf("client: %v", err)
	}
	var g, s, sent int64
	if _, err := fmt.Sscan(line, &g, &s, &sent, &replies); err != nil {
		cl.r.Fatalf("client said %q: %v", line, err)
	}
	return time.Duration(g) * time.Microsecond, time.Duration(s) * time.Microsecond, replies
}

func (cl *client) reset() {
	if _, err := io.WriteString(cl.in, "r\n"); err != nil {
		cl.r.Fatalf("client: %v", err)
	}
}

// waitAnswers waits until answers are coming (the last one under 20 ms
// ago) and returns the largest gap since the reset; false if they do not
// come back within max.
func (cl *client) waitAnswers(max time.Duration) (time.Duration, bool) {
	for deadline := time.Now().Add(max); ; time.Sleep(50 * time.Millisecond) {
		gap, since, replies := cl.query()
		if replies > 0 && since >= 0 && since < 20*time.Millisecond {
			return gap, true
		}
		if time.Now().After(deadline) {
			return gap, false
		}
	}
}

// close ends the probe (at the end of its input); it is idempotent.
func (cl *client) close() {
	if cl.in == nil {
		return
	}
	cl.in.Close()
	cl.in = nil
	_ = cl.wait()
}

// criuSelector is -criu-b's symlink, which the daemons run as their criu
// (--criu): use points it at the default criu or at B before each move.
type criuSelector struct {
	r          *testhost.Runner
	link, a, b string
}

func newCriuSelector(r *testhost.Runner, bin, b string) *criuSelector {
	a, err := exec.LookPath("criu")
	if err != nil {
		r.Fatalf("-criu-b: the default criu: %v", err)
	}
	if b, err = filepath.Abs(b); err != nil {
		r.Fatalf("-criu-b: %v", err)
	}
	dir := filepath.Join(bin, "criu-ab")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Fatalf("-criu-b: %v", err)
	}
	s := &criuSelector{r: r, link: filepath.Join(dir, "criu"), a: a, b: b}
	s.use("")
	return s
}

// use points the link at B for variant "b", else at the default criu
// (renaming a new link over it: an exec never sees it missing). A nil
// selector (no -criu-b) does nothing.
func (s *criuSelector) use(variant string) {
	if s == nil {
		return
	}
	target := s.a
	if variant == "b" {
		target = s.b
	}
	tmp := s.link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		s.r.Fatalf("-criu-b: %v", err)
	}
	if err := os.Rename(tmp, s.link); err != nil {
		s.r.Fatalf("-criu-b: %v", err)
	}
}

func criuNote(variant string) string {
	if variant == "" {
		return ""
	}
	return " (criu " + variant + ")"
}

// subject is one container a run moves back and forth, and its samples.
type subject struct {
	sec, criu, name, at string
	client              *client
	cs                  Case
	// moved, if set, runs as soon as a move's command returns.
	moved                                                                   func()
	frozen, gap, clientGap, total, sd, ur, report, post, pull, passes, dump []float64
	memPasses                                                               []float64
}

// launchSubject launches the container of one kind (security) and size,
// moved with criu variant ("" or -criu-b's "b").
func launchSubject(r *testhost.Runner, c *testhost.Cluster, sec string, size int, variant string) *subject {
	sj := &subject{sec: sec, criu: variant, name: fmt.Sprintf("mig%d%s", size, variant), at: "alpha"}
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
	*sj = subject{sec: sj.sec, criu: sj.criu, name: sj.name, at: sj.at, client: sj.client, cs: cs, moved: sj.moved}
}

// move moves the container to the other host and records the timing.
func (sj *subject) move(r *testhost.Runner, c *testhost.Cluster, mode, beat, echo string, size, rate int) {
	to := map[string]string{"alpha": "beta", "beta": "alpha"}[sj.at]
	args := []string{"move", sj.at + ":" + sj.name, to + ":", "--format", "json"}
	if mode != "cold" {
		args = append(args, "--live", "--memory", mode)
		c.OK("exec", sj.at+":"+sj.name, "--", "touch", "/tmp/beat.reset")
		sj.client.reset()
		time.Sleep(300 * time.Millisecond) // let it take the reset, then tick normally
	}
	var t api.MigrationTiming
	out := c.OK(args...)
	if sj.moved != nil {
		sj.moved()
	}
	if err := json.Unmarshal([]byte(out), &t); err != nil {
		r.Fatalf("timing: %v", err)
	}
	sj.at = to
	if mode == "cold" {
		startBeat(r, c, sj.at, sj.name, beat, size, rate) // a cold move restarts it
		startEcho(c, sj.at, sj.name, echo)
	} else {
		time.Sleep(200 * time.Millisecond)
		us, _ := strconv.Atoi(strings.TrimSpace(c.OK("exec", sj.at+":"+sj.name, "--", "cat", "/tmp/beat.max")))
		sj.gap = append(sj.gap, float64(us)/1000)
		gap, ok := sj.client.waitAnswers(10 * time.Second)
		if !ok {
			r.Fatalf("%s: the client got no answer within 10 s of the move to %s", sj.name, sj.at)
		}
		sj.clientGap = append(sj.clientGap, benchutil.Ms(gap))
	}
	sj.cs.Timings = append(sj.cs.Timings, t)
	sj.frozen = append(sj.frozen, t.FrozenTotal*1000)
	sj.total = append(sj.total, t.Total*1000)
	sj.sd = append(sj.sd, t.SuspendDump*1000)
	sj.ur = append(sj.ur, t.UndumpResume*1000)
	sj.report = append(sj.report, t.ResumeReport*1000)
	sj.post = append(sj.post, t.Postcopy*1000)
	if t.Postcopy > 0 {
		sj.pull = append(sj.pull, float64(t.PostcopyBytes)/t.Postcopy/1e6)
	}
	sj.passes = append(sj.passes, float64(t.PrecopyIterations))
	if len(t.MemoryPasses) > 0 {
		sj.memPasses = append(sj.memPasses, float64(len(t.MemoryPasses)))
		var mib []float64
		for _, p := range t.MemoryPasses {
			mib = append(mib, float64(p.Bytes)/(1<<20))
		}
		sj.cs.MemoryPassMiB = append(sj.cs.MemoryPassMiB, mib)
	}
	sj.dump = append(sj.dump, float64(t.DumpBytes)/(1<<20))
}

// pullNote describes the last move's post-copy pull, for the progress line.
func (sj *subject) pullNote(mode string) string {
	if len(sj.cs.Timings) == 0 {
		return ""
	}
	t := sj.cs.Timings[len(sj.cs.Timings)-1]
	if len(t.MemoryPasses) > 0 {
		var mib []string
		for _, p := range t.MemoryPasses {
			mib = append(mib, fmt.Sprintf("%.0f", float64(p.Bytes)/(1<<20)))
		}
		return fmt.Sprintf(", %s, memory passes %s MiB, final dump %.1f MiB", t.Mode, strings.Join(mib, "+"), float64(t.DumpBytes)/(1<<20))
	}
	if mode != api.MemoryLazy || len(sj.pull) == 0 {
		return ""
	}
	return fmt.Sprintf(", post-copy %.0f ms %.0f MiB (%.0f MB/s)", t.Postcopy*1000, float64(t.PostcopyBytes)/(1<<20), sj.pull[len(sj.pull)-1])
}

// summary is the case of mode over the moves recorded since reset.
func (sj *subject) summary(mode string, n int) Case {
	cs := sj.cs
	cs.Moves = n
	cs.FrozenMs, cs.TotalMs = benchutil.Summarise(sj.frozen), benchutil.Summarise(sj.total)
	cs.SuspendDumpMs, cs.UndumpResumeMs = benchutil.Summarise(sj.sd), benchutil.Summarise(sj.ur)
	cs.ResumeReportMs = benchutil.Summarise(sj.report)
	cs.PrecopyPasses, cs.DumpMiB = benchutil.Summarise(sj.passes), benchutil.Summarise(sj.dump)
	if len(sj.memPasses) > 0 {
		cs.MemoryPasses = benchutil.Summarise(sj.memPasses)
	}
	if mode == api.MemoryLazy {
		cs.PostcopyMs = benchutil.Summarise(sj.post)
		cs.PullMBps = benchutil.Summarise(sj.pull)
	}
	if len(sj.gap) > 0 {
		cs.HeartbeatGapMs = benchutil.Summarise(sj.gap)
	}
	if len(sj.clientGap) > 0 {
		cs.ClientGapMs, cs.ClientGapsMs = benchutil.Summarise(sj.clientGap), sj.clientGap
	}
	return cs
}
