package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCriuLogCause reads real CRIU 4.1.1 logs (testdata/criu, excerpts of
// runs on this project's test machine) and checks which line each failure
// is blamed on: the first real error, never the rlimit line every
// unprivileged run logs, never the closing "Dumping FAILED.".
func TestCriuLogCause(t *testing.T) {
	for _, tc := range []struct {
		log   string
		cause string // "" for a run without a real error
	}{
		// A copy-mode dump whose page FIFO's reader went away (the
		// migration target died): the broken pipe, then the unwinding.
		{"dump-pages-reader-gone.log", "page-xfer: Unable to spice data: Broken pipe (criu/page-xfer.c:263)"},
		// A dump of a process that is gone.
		{"dump-no-such-process.log", "Unable to detach from 999999: No such process (compel/src/lib/infect.c:418)"},
		// A restore from an empty directory: CRIU's error, then the
		// tail's "No inventory.img image".
		{"restore-no-images.log", "Unexpected EOF on (empty-image) (criu/protobuf.c:72)"},
		// A successful dump: only the rlimit noise and a warning.
		{"dump-ok.log", ""},
	} {
		path := filepath.Join("testdata", "criu", tc.log)
		r, err := readCriuLog(path)
		if err != nil {
			t.Fatal(err)
		}
		if r.cause != tc.cause {
			t.Errorf("%s: cause %q, want %q", tc.log, r.cause, tc.cause)
		}
		out := criuLogErrors(path)
		if strings.Contains(out, "RLIMIT_NOFILE") {
			t.Errorf("%s: the rlimit noise is quoted:\n%s", tc.log, out)
		}
		if tc.cause != "" {
			if first, _, _ := strings.Cut(out, "\n"); first != ": "+tc.cause {
				t.Errorf("%s: first line %q, want the cause", tc.log, first)
			}
		}
	}
	// The unwinding after the cause is quoted, in order, after it.
	out := criuLogErrors(filepath.Join("testdata", "criu", "dump-pages-reader-gone.log"))
	i, j, k := strings.Index(out, "Broken pipe"), strings.Index(out, "Can't dump page with parasite"), strings.Index(out, "Dumping FAILED.")
	if i < 0 || j < i || k < j {
		t.Errorf("error lines missing or out of order:\n%s", out)
	}
	// The tail carries what is not an error line.
	if out := criuLogErrors(filepath.Join("testdata", "criu", "restore-no-images.log")); !strings.Contains(out, "No inventory.img image") {
		t.Errorf("the tail is not quoted:\n%s", out)
	}
}

// TestClassifyCriuLine covers the line formats one by one.
func TestClassifyCriuLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		kind criuLineKind
		msg  string
	}{
		{"(00.003688) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted",
			criuLineNoise, "rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted (criu/util.c:1533)"},
		{"(00.216897) Error (criu/page-xfer.c:263): page-xfer: Unable to spice data: Broken pipe",
			criuLineError, "page-xfer: Unable to spice data: Broken pipe (criu/page-xfer.c:263)"},
		{"(00.219053) Error (criu/cr-dump.c:2111): Dumping FAILED.", criuLineSummary, "Dumping FAILED. (criu/cr-dump.c:2111)"},
		{"pie: 23: Error (criu/pie/parasite.c:540): Can't dump", criuLineError, "Can't dump (criu/pie/parasite.c:540)"},
		{"(  1.234567) Error (criu/cr-restore.c:2400): Restoring FAILED.", criuLineSummary, "Restoring FAILED. (criu/cr-restore.c:2400)"},
		{"(00.006457) Warn  (compel/arch/x86/src/lib/infect.c:418): Will restore 20895 with interrupted system call", criuLineInfo, ""},
		{"(00.001206) No inventory.img image", criuLineInfo, ""},
		{"(00.035616) page-xfer: 	p 0x7fedeb51e000 [1019]", criuLineInfo, ""},
	} {
		kind, msg := classifyCriuLine(tc.line)
		if kind != tc.kind || msg != tc.msg {
			t.Errorf("%q: %d %q, want %d %q", tc.line, kind, msg, tc.kind, tc.msg)
		}
	}
}

// TestCriuLogMissing: no log, nothing to quote.
func TestCriuLogMissing(t *testing.T) {
	if out := criuLogErrors(filepath.Join(t.TempDir(), "dump.log")); out != "" {
		t.Errorf("missing log quoted as %q", out)
	}
	empty := filepath.Join(t.TempDir(), "dump.log")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := criuLogErrors(empty); out != "" {
		t.Errorf("empty log quoted as %q", out)
	}
}

// TestCriuRequestError: CRIU's answer to a failed request carries the
// first error it logged, here (as on every unprivileged run) the rlimit
// noise: it never leads the error; the log's cause does.
func TestCriuRequestError(t *testing.T) {
	// As CRIU 4.1.1 answered a dump that found a zombie.
	noise := &criuRequestError{msg: "Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"}
	if got := noise.Error(); got != "criu failed" {
		t.Errorf("noise message: %q", got)
	}
	cause := &criuRequestError{msg: "Error (criu/seize.c:335): zombie 17986 (comm undumpable) found while seizing\n", errno: 3}
	if got, want := cause.Error(), "criu failed: no such process: zombie 17986 (comm undumpable) found while seizing (criu/seize.c:335)"; got != want {
		t.Errorf("real message: %q, want %q", got, want)
	}
	err := criuFailure(noise, filepath.Join("testdata", "criu", "dump-pages-reader-gone.log"))
	first, _, _ := strings.Cut(err.Error(), "\n")
	if want := "criu failed: page-xfer: Unable to spice data: Broken pipe (criu/page-xfer.c:263)"; first != want {
		t.Errorf("first line %q, want %q", first, want)
	}
	// Without a log, CRIU's own message is all there is.
	if got := criuFailure(cause, filepath.Join(t.TempDir(), "none.log")).Error(); got != cause.Error() {
		t.Errorf("without a log: %q", got)
	}
}
