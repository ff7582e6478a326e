package testutil

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Imports returns, for each non-test Go file of the package in the test's
// directory, the import paths it names: for tests that keep a package
// off certain others (the CLI off the daemon, say).
func Imports(t testing.TB) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
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
			out[f] = append(out[f], path)
		}
	}
	if len(out) == 0 {
		t.Fatal("no Go files: the test runs in the wrong directory")
	}
	return out
}
