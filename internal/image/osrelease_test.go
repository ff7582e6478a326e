package image

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseOSRelease(t *testing.T) {
	in := `# comment
NAME="Debian GNU/Linux"
VERSION_ID="12"
PRETTY_NAME='Debian GNU/Linux 12 (bookworm)'
ID=debian
HOME_URL="https://www.debian.org/"
garbage line
ID_LIKE=
`
	rel, err := ParseOSRelease(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := OSRelease{ID: "debian", Name: "Debian GNU/Linux", VersionID: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}
	if rel != want {
		t.Fatalf("got %+v, want %+v", rel, want)
	}
	rel, _ = ParseOSRelease(strings.NewReader(`NAME="A \"quoted\" \$name"` + "\nID='it\\s'\n"))
	if rel.Name != `A "quoted" $name` || rel.ID != `it\s` {
		t.Fatalf("escapes: %+v", rel)
	}
}

func TestReadOSRelease(t *testing.T) {
	write := func(root, name, content string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(root, name, target string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}

	// The usual layout: a relative link into /usr/lib.
	root := t.TempDir()
	write(root, "usr/lib/os-release", "ID=inside\n")
	link(root, "etc/os-release", "../usr/lib/os-release")
	if rel, err := ReadOSRelease(root); err != nil || rel.ID != "inside" {
		t.Errorf("relative link: %+v, %v", rel, err)
	}

	// Links leading out of the root are not followed: the host's file is
	// never read, /usr/lib/os-release is.
	outside := t.TempDir()
	write(outside, "os-release", "ID=outside\n")
	for _, target := range []string{"../../../../../../../../" + outside + "/os-release", outside + "/os-release"} {
		root := t.TempDir()
		write(root, "usr/lib/os-release", "ID=inside\n")
		link(root, "etc/os-release", target)
		if rel, err := ReadOSRelease(root); err != nil || rel.ID != "inside" {
			t.Errorf("link to %s: %+v, %v", target, rel, err)
		}
	}

	if _, err := ReadOSRelease(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no os-release: %v", err)
	}
}

func TestCleanMemberName(t *testing.T) {
	for in, want := range map[string]string{
		"etc/passwd": "etc/passwd", "./etc/passwd": "etc/passwd", "/etc/": "etc",
		"./": "", ".": "", "a//b/./c": "a/b/c",
	} {
		if got, err := cleanMemberName(in); err != nil || got != want {
			t.Errorf("cleanMemberName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../etc", "a/../../b", "/../x", "a/.."} {
		if _, err := cleanMemberName(in); !errors.Is(err, ErrInvalidImage) {
			t.Errorf("cleanMemberName(%q) accepted", in)
		}
	}
}

func TestNormalizeSignal(t *testing.T) {
	for in, want := range map[string]string{"SIGTERM": "SIGTERM", "term": "SIGTERM", "RTMIN+3": "SIGRTMIN+3", "15": "15"} {
		if got := normalizeSignal(in); got != want {
			t.Errorf("normalizeSignal(%q) = %q, want %q", in, got, want)
		}
	}
}
