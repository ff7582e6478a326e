package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFirstFile(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{missing, exe, "tool"}, exe},
		{[]string{missing, plain, "tool"}, "tool"}, // not executable
		{[]string{dir, "tool"}, "tool"},            // a directory
		{[]string{"tool"}, "tool"},
	} {
		if got := firstFile(c.paths); got != c.want {
			t.Errorf("firstFile(%v) = %q, want %q", c.paths, got, c.want)
		}
	}
}

func TestCriuPath(t *testing.T) {
	for _, c := range []struct{ criu, path, want string }{
		{"/usr/lib/vessel/criu", "/usr/sbin:/usr/bin", "/usr/lib/vessel:/usr/sbin:/usr/bin"},
		{"/usr/lib/vessel/criu", "", "/usr/lib/vessel"},
		{"", "/usr/bin", "/usr/bin"},
	} {
		if got := criuPath(c.criu, c.path); got != c.want {
			t.Errorf("criuPath(%q, %q) = %q, want %q", c.criu, c.path, got, c.want)
		}
	}
}

// The package's paths come first: an installed vessel uses its own runc,
// criu and shim, not a distribution's of the same name.
func TestDefaultsPreferPackage(t *testing.T) {
	for _, l := range [][]string{DefaultRunc, DefaultCriu, DefaultShim} {
		if filepath.Dir(l[0]) != "/usr/lib/vessel" {
			t.Errorf("%v: want /usr/lib/vessel first", l)
		}
		if last := l[len(l)-1]; filepath.IsAbs(last) {
			t.Errorf("%v: want a PATH name last", l)
		}
	}
}
