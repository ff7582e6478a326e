package shim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(path, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := openLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	// "old\n12345\n" reaches 10 bytes: rotated. "678\nabc\ndef\n" passes
	// 10 again: rotated over the first old file. "gh\n" stays.
	for _, s := range []string{"12345\n", "678\n", "abc\n", "def\n", "gh\n"} {
		if _, err := l.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	cur, _ := os.ReadFile(path)
	old, _ := os.ReadFile(path + ".1")
	if string(cur) != "gh\n" || string(old) != "678\nabc\ndef\n" {
		t.Errorf("current %q, old %q", cur, old)
	}
	if _, err := os.Stat(path + ".2"); !os.IsNotExist(err) {
		t.Error("more than one old file kept")
	}
}
