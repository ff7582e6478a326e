package server

import (
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// TestNoDaemonImport: the API layer sees the daemon only through Core;
// cmd/vesseld wires the daemon in.
func TestNoDaemonImport(t *testing.T) {
	for f, paths := range testutil.Imports(t) {
		for _, path := range paths {
			if path == "github.com/vesselhost/vessel/internal/daemon" {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
