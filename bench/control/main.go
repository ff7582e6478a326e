// Command control measures how responsive vessel's control plane stays
// under load: the latency of `vessel list` (through the API from this
// process, and as the CLI binary) with N running containers, first idle,
// then while every container spins a CPU hog and every k-th one also writes
// to disk with direct I/O, saturating both cores. Under load it alternates,
// in the same run and against the same containers, between vesseld's
// control cgroup weight on (the default, 10x the containers') and off
// (--control-cpu-weight=0: equal), restarting the daemon in between
// (containers keep running). It prints JSON.
//
//	go run ./bench/control -n 50 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/load"
	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Phase is one measured stretch.
type Phase struct {
	Name string `json:"name"`
	// API is the latency of GET /1.0/instances from this process, ms.
	API benchutil.Stats `json:"api_list_ms"`
	// CLI is the wall time of `vessel list --format csv`, ms.
	CLI benchutil.Stats `json:"cli_list_ms"`
	// ContainersCPU is the CPU the containers got, in cores (out of
	// Result.Machine.CPUs), averaged over the phase.
	ContainersCPU float64 `json:"containers_cpu_cores"`

	apiSamples, cliSamples []float64
}

// Mode pools the phases of one setting over the rounds.
type Mode struct {
	API benchutil.Stats `json:"api_list_ms"`
	CLI benchutil.Stats `json:"cli_list_ms"`
	// APIP99PerRound are the per-round p99s; their median is reported too.
	APIP99PerRound []float64 `json:"api_p99_per_round_ms"`
	APIP99Median   float64   `json:"api_p99_median_of_rounds_ms"`
	ContainersCPU  float64   `json:"containers_cpu_cores"`
}

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark  string            `json:"benchmark"`
	Machine    benchutil.Machine `json:"machine"`
	Containers int               `json:"containers"`
	DiskHogs   int               `json:"disk_hogs"`
	Rounds     int               `json:"rounds"`
	Samples    int               `json:"api_samples_per_phase"`
	Phases     []Phase           `json:"phases"`
	Idle       Mode              `json:"idle"`
	WeightOn   Mode              `json:"load_control_weight_on"`
	WeightOff  Mode              `json:"load_control_weight_off"`
	Ratios     struct {
		APIP99OnVsIdle  float64 `json:"api_p99_on_vs_idle"`
		APIP99OffVsIdle float64 `json:"api_p99_off_vs_idle"`
		CLIP99OnVsIdle  float64 `json:"cli_p99_on_vs_idle"`
		CLIP99OffVsIdle float64 `json:"cli_p99_off_vs_idle"`
	} `json:"ratios"`
	Goal      string             `json:"goal"`
	Reference map[string]float64 `json:"reference"`
}

type bench struct {
	r        *testhost.Runner
	h        *testhost.Host
	names    []string
	samples  int
	cli      int
	interval time.Duration
	parent   cgroups.Manager
}

func main() {
	n := flag.Int("n", 50, "running containers")
	diskEvery := flag.Int("disk-every", 5, "every k-th container also runs a disk hog")
	rounds := flag.Int("rounds", 3, "rounds of (weight on, weight off) under load")
	samples := flag.Int("samples", 200, "API list calls per phase")
	cliSamples := flag.Int("cli", 30, "CLI list runs per phase")
	interval := flag.Duration("interval", 20*time.Millisecond, "pause between list calls")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	h := testhost.New(r, bin, testhost.Options{StorageSizeMiB: 4096})
	b := &bench{r: r, h: h, samples: *samples, cli: *cliSamples, interval: *interval}
	var err error
	if b.parent, err = cgroups.New(h.CgroupParent()); err != nil {
		r.Fatalf("%v", err)
	}

	res := Result{Benchmark: "control", Machine: benchutil.ThisMachine(), Containers: *n, Rounds: *rounds, Samples: *samples,
		Goal:      "p99 of list under load with the control weight on within 2x of idle",
		Reference: map[string]float64{"incus_6.0.4_list_10_busy_p50_ms": 260, "incus_6.0.4_list_10_busy_p99_ms": 500, "incus_6.0.4_list_idle_ms": 72}}
	for i := range *n {
		b.names = append(b.names, fmt.Sprintf("c%d", i))
	}
	r.Logf("creating %d containers with hogs", *n)
	if err := benchutil.Parallel(*n, 4, func(i int) error {
		kinds := []string{load.CPU}
		if *diskEvery > 0 && i%*diskEvery == 0 {
			kinds = append(kinds, load.Disk)
		}
		if err := b.do(h.Client().CreateInstance(context.Background(), api.InstancesPost{
			Name: b.names[i], Source: api.InstanceSource{Type: "image", Image: "busybox"}})); err != nil {
			return err
		}
		if err := load.Install(h, b.names[i], kinds...); err != nil {
			return err
		}
		return b.do(h.Client().UpdateInstanceState(context.Background(), b.names[i], api.InstanceStatePut{Action: api.ActionStart}))
	}); err != nil {
		r.Fatalf("%v", err)
	}
	if *diskEvery > 0 {
		res.DiskHogs = (*n + *diskEvery - 1) / *diskEvery
	}

	var idle, on, off []Phase
	idle = append(idle, b.phase("idle"))
	r.Logf("hogs on")
	if err := load.Set(h, b.names, true); err != nil {
		r.Fatalf("%v", err)
	}
	time.Sleep(5 * time.Second)
	for round := range *rounds {
		// Alternate the order so that drift favours neither setting.
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, weightOn := range order {
			if weightOn {
				h.RestartWith()
				time.Sleep(2 * time.Second)
				on = append(on, b.phase(fmt.Sprintf("load, weight on, round %d", round+1)))
			} else {
				h.RestartWith("--control-cpu-weight=0")
				time.Sleep(2 * time.Second)
				off = append(off, b.phase(fmt.Sprintf("load, weight off, round %d", round+1)))
			}
		}
	}
	h.RestartWith()
	if err := load.Set(h, b.names, false); err != nil {
		r.Fatalf("%v", err)
	}
	time.Sleep(3 * time.Second)
	idle = append(idle, b.phase("idle again"))

	res.Phases = append(append(append(res.Phases, idle...), on...), off...)
	res.Idle, res.WeightOn, res.WeightOff = pool(idle), pool(on), pool(off)
	res.Ratios.APIP99OnVsIdle = benchutil.Ratio(res.WeightOn.API.P99, res.Idle.API.P99)
	res.Ratios.APIP99OffVsIdle = benchutil.Ratio(res.WeightOff.API.P99, res.Idle.API.P99)
	res.Ratios.CLIP99OnVsIdle = benchutil.Ratio(res.WeightOn.CLI.P99, res.Idle.CLI.P99)
	res.Ratios.CLIP99OffVsIdle = benchutil.Ratio(res.WeightOff.CLI.P99, res.Idle.CLI.P99)

	benchutil.Emit(r, res, *out)
}

// do waits for an operation.
func (b *bench) do(op interface {
	Wait(context.Context, func(api.Operation)) error
}, err error) error {
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return op.Wait(ctx, nil)
}

// phase measures list latency through the API and the CLI, and the CPU the
// containers got meanwhile.
func (b *bench) phase(name string) Phase {
	b.r.Logf("phase: %s", name)
	p := Phase{Name: name}
	cpu0, t0 := b.containersCPU(), time.Now()
	var api, cli []float64
	for range b.samples {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s := time.Now()
		list, err := b.h.Client().Instances(ctx)
		d := time.Since(s)
		cancel()
		if err != nil || len(list) != len(b.names) {
			b.r.Fatalf("list: %d instances, %v", len(list), err)
		}
		api = append(api, benchutil.Ms(d))
		time.Sleep(b.interval)
	}
	vessel := filepath.Join(b.h.Bin(), "vessel")
	for range b.cli {
		cmd := exec.Command(vessel, "list", "--format", "csv")
		cmd.Env = b.h.Env()
		s := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.r.Fatalf("vessel list: %v\n%s", err, out)
		}
		cli = append(cli, benchutil.Ms(time.Since(s)))
		time.Sleep(b.interval)
	}
	p.API, p.CLI = benchutil.Summarise(api), benchutil.Summarise(cli)
	p.ContainersCPU = round((b.containersCPU() - cpu0) / time.Since(t0).Seconds())
	b.r.Logf("  api p50 %.1f p99 %.1f max %.1f ms; cli p50 %.1f p99 %.1f ms; containers %.2f cores",
		p.API.Median, p.API.P99, p.API.Max, p.CLI.Median, p.CLI.P99, p.ContainersCPU)
	p.apiSamples, p.cliSamples = api, cli
	return p
}

// containersCPU returns the CPU seconds used by all containers so far.
func (b *bench) containersCPU() float64 {
	st, err := b.parent.Stats()
	if err != nil {
		b.r.Fatalf("%v", err)
	}
	return float64(st.CPUUsage) / 1e9
}

// pool merges the samples of phases of one setting.
func pool(ps []Phase) Mode {
	var api, cli, p99s []float64
	var cpu float64
	for _, p := range ps {
		api = append(api, p.apiSamples...)
		cli = append(cli, p.cliSamples...)
		p99s = append(p99s, p.API.P99)
		cpu += p.ContainersCPU
	}
	m := Mode{API: benchutil.Summarise(api), CLI: benchutil.Summarise(cli), APIP99PerRound: p99s}
	m.APIP99Median = benchutil.Summarise(p99s).Median
	if len(ps) > 0 {
		m.ContainersCPU = round(cpu / float64(len(ps)))
	}
	return m
}

func round(v float64) float64 { return float64(int(v*1000+0.5)) / 1000 }
