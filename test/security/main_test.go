// Package security performs, for real, the attacks a tenant, a migration
// peer, a local host user or an API client could try against a vessel host,
// and checks that each fails with a clear error and leaves the host as it
// was. Every test runs real vesseld daemons (internal/testhost) as root
// against the real kernel, runc, CRIU and btrfs.
package security

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/vesselhost/vessel/internal/testhost"
)

// binDir holds the binaries built for this test run.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// make unit: every test here runs daemons as root.
		fmt.Println("skipped: security tests need root (make test)")
		os.Exit(0)
	}
	dir, err := testhost.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// host is a test host with this package's helpers.
type host struct {
	*testhost.Host
	t *testing.T
}

func newHost(t *testing.T, extraArgs ...string) *host {
	return &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: extraArgs}), t: t}
}
