package benchutil

import (
	"os"

	"github.com/vesselhost/vessel/internal/testhost"
)

// Start begins a benchmark program: a runner that cleans up on exit and on
// SIGINT, and vessel's binaries built into a directory it removes at the
// end. The caller defers r.Close().
func Start() (r *testhost.Runner, bin string) {
	r = testhost.NewRunner()
	return r, Bin(r)
}

// Bin builds vessel's binaries into a directory that r removes at the end.
func Bin(r *testhost.Runner) string {
	bin, err := testhost.Build()
	if err != nil {
		r.Fatalf("%v", err)
	}
	r.Cleanup(func() { os.RemoveAll(bin) })
	return bin
}

// Emit prints a result as JSON and, if path is set, writes it there too.
func Emit(r *testhost.Runner, v any, path string) {
	if err := WriteJSON(os.Stdout, v); err != nil {
		r.Errorf("write result: %v", err)
	}
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		r.Errorf("write result: %v", err)
		return
	}
	defer f.Close()
	if err := WriteJSON(f, v); err != nil {
		r.Errorf("write result: %v", err)
	}
}
