// Package benchutil is shared by vessel's benchmark programs: a runner
// that stands in for *testing.T when starting test hosts, sample
// statistics, and JSON output.
package benchutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runner implements testhost.T for a benchmark program: Fatalf ends the
// program after running the registered cleanups.
type Runner struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// NewRunner returns a runner that also cleans up when the program is
// interrupted (SIGINT, SIGTERM).
func NewRunner() *Runner {
	r := &Runner{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		r.Logf("%v: cleaning up", s)
		r.Close()
		os.Exit(130)
	}()
	return r
}

// Helper does nothing.
func (r *Runner) Helper() {}

// Logf writes to stderr.
func (r *Runner) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// Errorf logs and marks the run failed.
func (r *Runner) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	r.Logf("error: "+format, args...)
}

// Fatalf logs, cleans up and exits.
func (r *Runner) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.Close()
	os.Exit(1)
}

// Cleanup registers f to run at Close, last registered first.
func (r *Runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// Failed reports whether Errorf was called.
func (r *Runner) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// Close runs the cleanups.
func (r *Runner) Close() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Stats summarises samples.
type Stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// Summarise computes Stats (nearest-rank percentiles).
func Summarise(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stats{N: len(s), Median: round(median), P90: round(pct(0.90)), P99: round(pct(0.99)),
		Min: round(s[0]), Max: round(s[len(s)-1]), Mean: round(sum / float64(len(s)))}
}

// Ms returns a duration in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Ratio returns a/b rounded, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a / b)
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// Machine describes the machine a benchmark ran on.
type Machine struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	Time   string `json:"time"`
}

// ThisMachine returns the current machine's description.
func ThisMachine() Machine {
	out, _ := exec.Command("uname", "-r").Output()
	return Machine{Kernel: strings.TrimSpace(string(out)), CPUs: runtime.NumCPU(), Time: time.Now().UTC().Format(time.RFC3339)}
}

// WriteJSON writes v as indented JSON to w.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Parallel runs fn(0..n-1) with at most conc calls at a time and returns
// the errors joined.
func Parallel(n, conc int, fn func(i int) error) error {
	sem := make(chan struct{}, max(conc, 1))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
