package testutil

import (
	"os"
	"testing"
)

// NeedRoot marks a test that runs as root against the real kernel and
// tools (cgroups, loop devices, btrfs, netns, runc, CRIU). `go test
// -short` (make unit, which runs as an unprivileged user) skips it; a full
// run (make test) without root fails it: a missing prerequisite is a
// failure, not a skip.
func NeedRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root: runs against the real kernel (make test)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs against the real kernel and tools")
	}
}
