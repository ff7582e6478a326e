package gendocs

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// DirEnv names the environment variable that tells the command packages'
// TestDocs where to write the docs (`make deb` sets it); without it they
// go to a temporary directory, checked and thrown away.
const DirEnv = "VESSEL_DOCS_DIR"

// Test writes root's docs (into $VESSEL_DOCS_DIR, or a temporary
// directory) and checks them: a gzipped roff page per available command
// naming it, and a bash completion script registering root's name.
func Test(t *testing.T, root *cobra.Command) {
	t.Helper()
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	files, err := Write(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]bool{}
	for _, f := range files {
		pages[filepath.Base(f)] = true
	}
	var check func(c *cobra.Command)
	check = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1.gz"
		if !pages[name] {
			t.Errorf("no man page %s for %q", name, c.CommandPath())
		} else if page := readGzip(t, filepath.Join(dir, "man", "man1", name)); !strings.Contains(page, ".TH \""+strings.ToUpper(strings.TrimSuffix(name, ".1.gz"))+"\"") {
			t.Errorf("%s: no .TH header naming the command", name)
		}
		for _, sub := range c.Commands() {
			check(sub)
		}
	}
	check(root)
	comp, err := os.ReadFile(filepath.Join(dir, "bash-completion", root.Name()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(comp), "complete -o default -F __start_"+root.Name()+" "+root.Name()) {
		t.Errorf("bash completion for %s registers no completion function", root.Name())
	}
}

func readGzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}
