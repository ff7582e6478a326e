// Package security performs, for real, the attacks a tenant, a migration
// peer, a local host user or an API client could try against a vessel host,
// and checks that each fails with a clear error and leaves the host as it
// was. Every test runs real vesseld daemons (internal/testhost) as root
// against the real kernel, runc, CRIU and btrfs.
package security

import (
	"testing"

	"github.com/vesselhost/vessel/internal/testhost"
	"github.com/vesselhost/vessel/internal/testhost/suite"
)

// binDir holds the binaries built for this test run.
var binDir string

func TestMain(m *testing.M) { suite.Main(m, "security", &binDir) }

// host is a test host with this package's helpers.
type host struct {
	*testhost.Host
	t *testing.T
}

func newHost(t *testing.T, extraArgs ...string) *host {
	return &host{Host: testhost.New(t, binDir, testhost.Options{ExtraArgs: extraArgs}), t: t}
}
