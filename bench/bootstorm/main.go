// Command bootstorm starts N containers, C at a time, and measures the time
// from each start request to its init running (the start operation's end:
// runc has reported init's pid), and the whole storm's time. Every started
// container spins a CPU hog from boot, so the host fills up as the storm
// goes on: the question is whether the per-container time stays flat.
// The same storm runs with vesseld's control cgroup weight on (default)
// and off (--control-cpu-weight=0), alternating over rounds, and, as the
// baseline, on a host that stays idle (hogs off), in one run against the
// same containers. It prints JSON.
//
//	go run ./bench/bootstorm -n 100 -c 25 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/load"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Storm is one boot storm.
type Storm struct {
	Setting string `json:"setting"`
	// StartMs is the per-container time from request to init running.
	StartMs benchutil.Stats `json:"start_ms"`
	// ByQuarter is the median start time of each quarter of the storm, in
	// start order: flat means the host's filling up does not slow starts.
	ByQuarterMs []float64 `json:"median_start_ms_by_quarter"`
	// LastVsFirstQuarter is the last quarter's median over the first's.
	LastVsFirstQuarter float64 `json:"last_vs_first_quarter"`
	TotalS             float64 `json:"total_s"`
	// IOPressurePct is the share of the storm's time during which some
	// task of the machine waited for I/O (/proc/pressure/io): a shared
	// machine's other I/O shows here, and so do stalls it causes (bbolt's
	// fsync).
	IOPressurePct float64 `json:"io_pressure_some_pct"`
}

// Mode pools the storms of one setting.
type Mode struct {
	StartMs            benchutil.Stats `json:"start_ms"`
	ByQuarterMs        []float64       `json:"median_start_ms_by_quarter"`
	LastVsFirstQuarter float64         `json:"last_vs_first_quarter"`
	TotalS             benchutil.Stats `json:"total_s"`
}

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark   string            `json:"benchmark"`
	Machine     benchutil.Machine `json:"machine"`
	Containers  int               `json:"containers"`
	Concurrency int               `json:"concurrency"`
	Rounds      int               `json:"rounds"`
	Storms      []Storm           `json:"storms"`
	Idle        Mode              `json:"idle_host"`
	WeightOn    Mode              `json:"control_weight_on"`
	WeightOff   Mode              `json:"control_weight_off"`
	Ratios      struct {
		TotalOffVsOn   float64 `json:"total_off_vs_on"`
		MedianOffVsOn  float64 `json:"median_start_off_vs_on"`
		MedianOnVsIdle float64 `json:"median_start_on_vs_idle_host"`
	} `json:"ratios"`
}

func main() {
	n := flag.Int("n", 100, "containers to start")
	conc := flag.Int("c", 25, "starts in flight at a time")
	rounds := flag.Int("rounds", 3, "rounds of (idle host, weight on, weight off) storms")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	h := testhost.New(r, bin, testhost.Options{StorageSizeMiB: 4096})
	c := h.Client()

	names := make([]string, *n)
	for i := range names {
		names[i] = fmt.Sprintf("b%d", i)
	}
	r.Logf("creating %d containers", *n)
	if err := benchutil.Parallel(*n, 4, func(i int) error {
		if err := wait(c.CreateInstance(context.Background(), api.InstancesPost{
			Name: names[i], Source: api.InstanceSource{Type: "image", Image: "busybox"}})); err != nil {
			return err
		}
		return load.Install(h, names[i], load.CPU)
	}); err != nil {
		r.Fatalf("%v", err)
	}

	res := Result{Benchmark: "bootstorm", Machine: benchutil.ThisMachine(), Containers: *n, Concurrency: *conc, Rounds: *rounds}
	var idle, on, off []Storm
	run := func(label string, weightOn, hogs bool) Storm {
		if weightOn {
			h.RestartWith()
		} else {
			h.RestartWith("--control-cpu-weight=0")
		}
		if err := load.Set(h, names, hogs); err != nil {
			r.Fatalf("%v", err)
		}
		s := storm(r, h.Client(), names, *conc)
		s.Setting = label
		r.Logf("storm, %s: total %.1f s, start median %.0f ms p99 %.0f ms, quarters %v, I/O pressure %.1f%%",
			label, s.TotalS, s.StartMs.Median, s.StartMs.P99, s.ByQuarterMs, s.IOPressurePct)
		res.Storms = append(res.Storms, s)
		stopAll(r, h.Client(), names, *conc)
		return s
	}
	for round := range *rounds {
		// The baseline: the same storm on a host that stays idle.
		idle = append(idle, run("idle host (no hogs), weight on", true, false))
		// Alternate the order so that drift favours neither setting.
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, weightOn := range order {
			if weightOn {
				on = append(on, run("hogs, control weight on (1000 vs 100)", true, true))
			} else {
				off = append(off, run("hogs, control weight off (100 vs 100)", false, true))
			}
		}
	}
	res.Idle = pool(idle)
	res.WeightOn, res.WeightOff = pool(on), pool(off)
	res.Ratios.TotalOffVsOn = benchutil.Ratio(res.WeightOff.TotalS.Median, res.WeightOn.TotalS.Median)
	res.Ratios.MedianOffVsOn = benchutil.Ratio(res.WeightOff.StartMs.Median, res.WeightOn.StartMs.Median)
	res.Ratios.MedianOnVsIdle = benchutil.Ratio(res.WeightOn.StartMs.Median, res.Idle.StartMs.Median)
	if err := load.Set(h, names, false); err != nil {
		r.Errorf("%v", err)
	}

	benchutil.Emit(r, res, *out)
}

func wait(op *client.Operation, err error) error {
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return op.Wait(ctx, nil)
}

// storm starts every container, conc at a time, in order.
func storm(r *testhost.Runner, c *client.Client, names []string, conc int) Storm {
	durs := make([]float64, len(names))
	io0 := ioPressure()
	t0 := time.Now()
	// Parallel starts fn(i) in order of i as slots free up: start order.
	err := benchutil.Parallel(len(names), conc, func(i int) error {
		s := time.Now()
		err := wait(c.UpdateInstanceState(context.Background(), names[i], api.InstanceStatePut{Action: api.ActionStart}))
		durs[i] = benchutil.Ms(time.Since(s))
		return err
	})
	if err != nil {
		r.Fatalf("storm: %v", err)
	}
	s := Storm{StartMs: benchutil.Summarise(durs), TotalS: time.Since(t0).Seconds()}
	s.IOPressurePct = float64(int((ioPressure()-io0)/(s.TotalS*1e6)*1000+0.5)) / 10
	s.ByQuarterMs = quarters(durs)
	s.LastVsFirstQuarter = benchutil.Ratio(s.ByQuarterMs[3], s.ByQuarterMs[0])
	s.TotalS = float64(int(s.TotalS*100+0.5)) / 100
	return s
}

// ioPressure returns the machine's total "some" I/O stall time in
// microseconds (0 without PSI).
func ioPressure() float64 {
	b, err := os.ReadFile("/proc/pressure/io")
	if err != nil {
		return 0
	}
	var avg10, avg60, avg300, total float64
	if _, err := fmt.Sscanf(string(b), "some avg10=%f avg60=%f avg300=%f total=%f", &avg10, &avg60, &avg300, &total); err != nil {
		return 0
	}
	return total
}

// quarters returns the median of each quarter of samples.
func quarters(d []float64) []float64 {
	out := make([]float64, 4)
	for q := range 4 {
		out[q] = benchutil.Summarise(d[q*len(d)/4 : (q+1)*len(d)/4]).Median
	}
	return out
}

// stopAll kills every container (not measured).
func stopAll(r *testhost.Runner, c *client.Client, names []string, conc int) {
	if err := benchutil.Parallel(len(names), conc, func(i int) error {
		return wait(c.UpdateInstanceState(context.Background(), names[i], api.InstanceStatePut{Action: api.ActionStop, Force: true}))
	}); err != nil {
		r.Fatalf("stop: %v", err)
	}
}

// pool merges storms of one setting: per-container samples are not kept
// across storms, so the start statistics are medians of the storms'.
func pool(ss []Storm) Mode {
	var m Mode
	if len(ss) == 0 {
		return m
	}
	var med, p90, p99, mx, mn, tot []float64
	q := make([][]float64, 4)
	for _, s := range ss {
		med, p90, p99 = append(med, s.StartMs.Median), append(p90, s.StartMs.P90), append(p99, s.StartMs.P99)
		mx, mn, tot = append(mx, s.StartMs.Max), append(mn, s.StartMs.Min), append(tot, s.TotalS)
		for i := range 4 {
			q[i] = append(q[i], s.ByQuarterMs[i])
		}
	}
	mid := func(v []float64) float64 { return benchutil.Summarise(v).Median }
	m.StartMs = benchutil.Stats{N: ss[0].StartMs.N * len(ss), Median: mid(med), P90: mid(p90), P99: mid(p99), Min: mid(mn), Max: mid(mx)}
	for i := range 4 {
		m.ByQuarterMs = append(m.ByQuarterMs, mid(q[i]))
	}
	m.LastVsFirstQuarter = benchutil.Ratio(m.ByQuarterMs[3], m.ByQuarterMs[0])
	m.TotalS = benchutil.Summarise(tot)
	return m
}
