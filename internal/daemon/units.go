package daemon

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Values of limits.* keys are written the way users of Incus and Docker
// write them:
//
//   - sizes: a number with an optional unit, decimal (kB, MB, GB, TB: powers
//     of 1000) or binary (KiB, MiB, GiB, TiB, and Docker's k, m, g, t:
//     powers of 1024); no unit (or "B") means bytes. Units are
//     case-insensitive ("mb" is MB). Fractions are allowed ("1.5GiB").
//   - rates: a size per second, "/s" optional ("10MB", "10MB/s").
//   - operations per second: a whole number, "iops" optional ("100iops").
//   - cores: a decimal number of CPUs ("0.5", "2").

var numberUnit = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$`)

// sizeUnits maps lower-case unit names to their multipliers.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}

// maxSize bounds sizes and rates so they fit every kernel field they reach.
const maxSize = 1 << 60

// parseSize parses a size such as "512MiB" or "1GB" into bytes.
func parseSize(s string) (int64, error) {
	m := numberUnit.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("not a size (e.g. 512MiB, 1GB, 4096)")
	}
	mult, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)", m[2])
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("not a size: %w", err)
	}
	v := math.Round(n * mult)
	if v > maxSize {
		return 0, fmt.Errorf("too large (at most %s)", formatSize(maxSize))
	}
	return int64(v), nil
}

// parseRate parses a rate such as "10MB/s" or "10MiB" into bytes per second.
func parseRate(s string) (int64, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "/S")
	return parseSize(s)
}

// parseIOPS parses "100iops" or "100".
func parseIOPS(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if len(s) > 4 && strings.EqualFold(s[len(s)-4:], "iops") {
		s = strings.TrimSpace(s[:len(s)-4])
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a number of operations per second (e.g. 100iops)")
	}
	return n, nil
}

var decimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// parseCores parses a decimal number of CPUs.
func parseCores(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if !decimal.MatchString(s) {
		return 0, fmt.Errorf("not a number of CPUs (e.g. 0.5, 2)")
	}
	return strconv.ParseFloat(s, 64)
}

// formatSize writes bytes with the largest binary unit that divides them
// (for messages).
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		v    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d%s", n/u.v, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// secondsDuration converts a whole number of seconds a client sent (what
// names it in errors) to a duration no longer than limit. A negative or
// larger number is ErrInvalid: multiplied blindly, a large one would
// overflow time.Duration and wrap to a negative or tiny wait.
func secondsDuration(what string, n int, limit time.Duration) (time.Duration, error) {
	if n < 0 || int64(n) > int64(limit/time.Second) {
		return 0, errorf(ErrInvalid, "%s %d s out of range: want 0..%d seconds", what, n, int64(limit/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}
