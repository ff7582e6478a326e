package qemu

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDropCacheWhile: the dropper runs and stops (its goroutine has ended
// when stop returns), and a file that is not there gives a no-op.
func TestDropCacheWhile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.state")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := dropCacheWhile(path, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	stop()
	dropCacheWhile(filepath.Join(t.TempDir(), "missing"), time.Millisecond)()
}
