package main

import (
	"testing"

	"github.com/vesselhost/vessel/packaging/gendocs"
)

// TestDocs generates vesseld's man pages and bash completion (into
// $VESSEL_DOCS_DIR for `make deb`) and checks them.
func TestDocs(t *testing.T) { gendocs.Test(t, newRootCmd()) }
