package testhost

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Runner implements T for a program (benchmarks, scripts/testhosts): Fatalf ends the
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
