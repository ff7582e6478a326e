package benchutil

import (
	"errors"
	"sync"
	"testing"
)

func TestSummarise(t *testing.T) {
	s := Summarise([]float64{5, 1, 4, 2, 3})
	if s.N != 5 || s.Median != 3 || s.Min != 1 || s.Max != 5 || s.Mean != 3 || s.P90 != 5 {
		t.Fatalf("%+v", s)
	}
	if s := Summarise([]float64{1, 2, 3, 4}); s.Median != 2.5 {
		t.Fatalf("even median %+v", s)
	}
	if s := Summarise(nil); s.N != 0 {
		t.Fatalf("empty %+v", s)
	}
	if Ratio(1, 0) != 0 || Ratio(3, 2) != 1.5 {
		t.Fatal("Ratio")
	}
}

func TestParallel(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]bool{}
	running, peak := 0, 0
	err := Parallel(20, 3, func(i int) error {
		mu.Lock()
		seen[i] = true
		running++
		peak = max(peak, running)
		mu.Unlock()
		mu.Lock()
		running--
		mu.Unlock()
		if i == 7 {
			return errors.New("seven")
		}
		return nil
	})
	if len(seen) != 20 || peak > 3 || err == nil || err.Error() != "seven" {
		t.Fatalf("seen %d, peak %d, err %v", len(seen), peak, err)
	}
}
