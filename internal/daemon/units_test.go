package daemon

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestSecondsDuration: client-sent seconds convert within the limit; a
// negative or larger count, which time.Duration(n)*time.Second would wrap
// to a negative or tiny duration, is ErrInvalid.
func TestSecondsDuration(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{30, 30 * time.Second, true},
		{86400, 24 * time.Hour, true},
		{86401, 0, false},
		{-1, 0, false},
		{math.MaxInt64 / 1000, 0, false}, // wraps negative when multiplied
		{math.MaxInt, 0, false},
		{math.MinInt, 0, false},
	} {
		got, err := secondsDuration("stop timeout", c.n, 24*time.Hour)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("secondsDuration(%d) = %v, %v; want %v", c.n, got, err, c.want)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("secondsDuration(%d) = %v, %v; want ErrInvalid", c.n, got, err)
		}
	}
}
