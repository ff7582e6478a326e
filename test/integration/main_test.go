// Package integration drives real vesseld daemons (internal/testhost)
// through the vessel CLI, as root, against the real kernel, runc, CRIU and
// btrfs.
package integration

import (
	"testing"

	"github.com/vesselhost/vessel/internal/testhost"
	"github.com/vesselhost/vessel/internal/testhost/suite"
)

// binDir holds the binaries built for this test run.
var binDir string

func TestMain(m *testing.M) { suite.Main(m, "integration", &binDir) }

// host is a test host with this package's helpers.
type host struct {
	*testhost.Host
	t *testing.T
}

func newHost(t *testing.T) *host {
	return &host{Host: testhost.New(t, binDir, testhost.Options{}), t: t}
}
