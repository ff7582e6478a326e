package main

import (
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// module is this module's path: the CLI may use only two of its packages.
const module = "github.com/vesselhost/vessel/"

// allowedImports are the module's packages the CLI may import: it talks to
// vesseld only through the client and the wire types (ARCHITECTURE.md).
var allowedImports = map[string]bool{
	module + "internal/client": true,
	module + "internal/api":    true,
}

// TestImportsOnlyClientAndAPI fails if the CLI imports any package of this
// module other than internal/client and internal/api (the standard library
// and third-party libraries are fine).
func TestImportsOnlyClientAndAPI(t *testing.T) {
	for f, paths := range testutil.Imports(t) {
		for _, path := range paths {
			if strings.HasPrefix(path, module) && !allowedImports[path] {
				t.Errorf("%s imports %s; the CLI may use only internal/client and internal/api", f, path)
			}
		}
	}
}
