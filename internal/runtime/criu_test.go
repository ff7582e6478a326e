package runtime

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// A started CRIU service is ready for its request: it answered the
// version probe and still runs, waiting for the next message.
func TestCriuServiceReady(t *testing.T) {
	path, err := lookTool(DefaultCriuPath(), "criu")
	if err != nil {
		t.Skip("no criu:", err)
	}
	dir := t.TempDir()
	s, err := startCriuService(path, dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.cmd.Process.Signal(unix.Signal(0)); err != nil {
		t.Fatalf("criu exited after its version answer: %v", err)
	}
}

// A service that ends before it answers fails the start, with no process
// left.
func TestCriuServiceReadyFails(t *testing.T) {
	path, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false:", err)
	}
	dir := t.TempDir()
	s, err := startCriuService(path, dir, dir)
	if err == nil {
		s.close()
		t.Fatal("a service that exits at once started")
	}
}
