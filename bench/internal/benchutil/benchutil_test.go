package benchutil

import "testing"

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
