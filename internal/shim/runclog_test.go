package shim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRuncLogErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runc.log")
	log := `{"level":"warning","msg":"w","time":"t"}
{"level":"error","msg":"runc run failed: boom","time":"t"}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := RuncLogErrors(path); got != "runc run failed: boom" {
		t.Errorf("RuncLogErrors = %q", got)
	}
}
