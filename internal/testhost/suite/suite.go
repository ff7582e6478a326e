// Package suite holds the TestMain of the packages of root tests.
package suite

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/vesselhost/vessel/internal/testhost"
)

// Main is the TestMain of a package of root tests that drive real
// daemons (test/integration, test/security): under -short (make unit) it
// skips them all; otherwise it builds the binaries once into *binDir, runs
// the tests and removes them.
func Main(m *testing.M, suite string, binDir *string) {
	flag.Parse()
	if testing.Short() {
		fmt.Printf("skipped: %s tests need root (make test)\n", suite)
		os.Exit(0)
	}
	dir, err := testhost.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
