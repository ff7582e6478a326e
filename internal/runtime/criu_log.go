package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// A CRIU log is read here, and only here, when a CRIU run failed: which
// of its lines is the failure's cause, which are its consequences, and
// which are noise that must never be taken for a cause.
//
// CRIU logs an error as "(00.216897) Error (criu/page-xfer.c:263): msg"
// (pie code as "pie: 23: Error (...): msg"). The first error that is not
// noise is the cause: CRIU stops at its first real failure, and what it
// logs after is the unwinding ("Can't dump page with parasite", then
// "Dumping FAILED."). Not every fatal condition logs an error (a missing
// pstree.img only logs "No pstree.img image" before CRIU gives up), so the
// last lines are quoted too.

// criuTailLines is how many last lines of a CRIU log an error quotes.
const criuTailLines = 5

// criuErrorLine matches an error line: the optional timestamp and pie
// prefix, the source location, the message.
var criuErrorLine = regexp.MustCompile(`^(?:\(\s*[0-9.]+\)\s+)?(?:pie: \d+: )?Error \(([^)]*)\): (.*)$`)

// criuNoise are error lines CRIU logs on runs that succeed: never a cause.
var criuNoise = []string{
	// Without CAP_SYS_RESOURCE (an unprivileged container's user
	// namespace, a restricted host) every run logs this and carries on
	// with the limit it has.
	"rlimit: Can't setup RLIMIT_NOFILE",
}

// criuSummaries are the last words of a failed run: consequences, never
// the cause.
var criuSummaries = []string{
	"Dumping FAILED.",
	"Pre-dumping FAILED.",
	"Restoring FAILED.",
}

// criuLineKind is what one line of a CRIU log is to a failure.
type criuLineKind int

const (
	criuLineInfo    criuLineKind = iota // not an error
	criuLineNoise                       // an error line that is harmless
	criuLineSummary                     // "Dumping FAILED." and the like
	criuLineError                       // an error: the first is the cause
)

// classifyCriuLine says what a (trimmed) CRIU log line is, and for an
// error its message with the source location after it ("page-xfer:
// Unable to spice data: Broken pipe (criu/page-xfer.c:263)").
func classifyCriuLine(l string) (criuLineKind, string) {
	m := criuErrorLine.FindStringSubmatch(l)
	if m == nil {
		return criuLineInfo, ""
	}
	msg := strings.TrimSpace(m[2]) + " (" + m[1] + ")"
	switch {
	case slices.ContainsFunc(criuNoise, func(n string) bool { return strings.Contains(m[2], n) }):
		return criuLineNoise, msg
	case slices.ContainsFunc(criuSummaries, func(s string) bool { return strings.TrimSpace(m[2]) == s }):
		return criuLineSummary, msg
	}
	return criuLineError, msg
}

// criuLogReport is what a failed run's log says.
type criuLogReport struct {
	path string
	// cause is the first real error's message, or "" if the log has none.
	cause string
	// errors are the error lines (noise left out), in order.
	errors []string
	// tail are the last lines (noise left out).
	tail []string
}

// readCriuLog reads and classifies the CRIU log at path.
func readCriuLog(path string) (criuLogReport, error) {
	r := criuLogReport{path: path}
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		kind, msg := classifyCriuLine(l)
		switch kind {
		case criuLineNoise:
			continue
		case criuLineError:
			if r.cause == "" {
				r.cause = msg
			}
			r.errors = append(r.errors, l)
		case criuLineSummary:
			r.errors = append(r.errors, l)
		}
		if r.tail = append(r.tail, l); len(r.tail) > criuTailLines {
			r.tail = r.tail[1:]
		}
	}
	return r, sc.Err()
}

// String formats the report to be appended to an error message: ": " and
// the cause first (so the error's first line names it), then the error
// lines and the end of the log; "" if there is nothing to quote.
func (r criuLogReport) String() string {
	lines := slices.Clone(r.errors)
	for _, l := range r.tail {
		if !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	head := ""
	if r.cause != "" {
		head = ": " + r.cause
	}
	return fmt.Sprintf("%s\ncriu log %s (errors, then its end):\n%s", head, r.path, strings.Join(lines, "\n"))
}

// criuLogErrors returns what the CRIU log at path says of a failed run,
// formatted to be appended to an error message (see criuLogReport.String),
// or "" without a log.
func criuLogErrors(path string) string {
	r, err := readCriuLog(path)
	if err != nil && len(r.tail) == 0 {
		return ""
	}
	return r.String()
}

// criuRequestError is CRIU's answer to a request that failed: its errno,
// if any, and its message, which is the first error CRIU logged (often
// the rlimit noise: then it is left out).
type criuRequestError struct {
	msg   string
	errno int32
}

func (e *criuRequestError) Error() string {
	s := "criu failed"
	if e.errno != 0 {
		s += ": " + syscall.Errno(e.errno).Error()
	}
	if kind, msg := classifyCriuLine(strings.TrimSpace(e.msg)); kind == criuLineError || kind == criuLineSummary {
		s += ": " + msg
	} else if kind == criuLineInfo && strings.TrimSpace(e.msg) != "" {
		s += ": " + strings.TrimSpace(e.msg)
	}
	return s
}

// criuFailure is err, a failed CRIU request's, with what the CRIU log at
// path says appended (criuLogErrors); the log's cause replaces CRIU's own
// message, which repeats it (or is noise).
func criuFailure(err error, path string) error {
	report := criuLogErrors(path)
	var rerr *criuRequestError
	if errors.As(err, &rerr) && strings.HasPrefix(report, ": ") {
		err = &criuRequestError{errno: rerr.errno}
	}
	return fmt.Errorf("%w%s", err, report)
}
