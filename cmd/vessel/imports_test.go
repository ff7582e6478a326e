package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files: the test runs in the wrong directory")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) && !allowedImports[path] {
				t.Errorf("%s imports %s; the CLI may use only internal/client and internal/api", f, path)
			}
		}
	}
}
