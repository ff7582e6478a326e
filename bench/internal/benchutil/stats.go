// Package benchutil is shared by vessel's benchmark programs: sample
// statistics and JSON output. (The runner that stands in for *testing.T is
// testhost.Runner.)
package benchutil

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

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
