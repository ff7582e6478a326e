package integration

import (
	"strings"
	"testing"
)

// TestBadInput sends every verb bad input and checks that the error is
// clear and nothing changed.
func TestBadInput(t *testing.T) {
	h := newHost(t)
	h.OK("create", "busybox", "exists")
	before := h.OK("list", "--format", "csv")

	cases := []struct {
		want string
		args []string
	}{
		{"instance name", []string{"launch", "busybox", "Bad_Name"}},
		{"instance name", []string{"launch", "busybox", "--", "-starts-with-dash"}},
		{"instance name", []string{"launch", "busybox", "9lives"}},
		{"instance name", []string{"create", "busybox", strings.Repeat("a", 64)}},
		{"image \"nope\"", []string{"launch", "nope", "fresh"}},
		{"already exists", []string{"launch", "busybox", "exists"}},
		{"unknown configuration key", []string{"launch", "busybox", "fresh", "-c", "limits.nonsense=1"}},
		{"bad key=value", []string{"launch", "busybox", "fresh", "-c", "novalue"}},
		{"unknown remote", []string{"launch", "busybox", "elsewhere:fresh"}},
		{"not found", []string{"start", "ghost"}},
		{"not found", []string{"stop", "ghost"}},
		{"not found", []string{"restart", "ghost"}},
		{"not found", []string{"delete", "ghost"}},
		{"not found", []string{"info", "ghost"}},
		{"not found", []string{"exec", "ghost", "--", "true"}},
		{"not found", []string{"console", "ghost"}},
		{"not running", []string{"stop", "exists"}},
		{"not running", []string{"restart", "exists"}},
		{"not running", []string{"exec", "exists", "--", "true"}},
		{"unknown format", []string{"list", "--format", "xml"}},
		{"not found", []string{"image", "delete", "ghost-image"}},
		{"not found", []string{"image", "info", "ghost-image"}},
		{"unknown distro", []string{"image", "build", "gentoo"}},
	}
	for _, c := range cases {
		h.Fails(c.want, c.args...)
	}
	if after := h.OK("list", "--format", "csv"); after != before {
		t.Fatalf("bad input changed the list:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A failed launch leaves no volume behind.
	h.assertNoInstanceTraces("fresh")
	// An empty file is not an image.
	h.Fails("invalid image", "image", "import", "/dev/null")
}
