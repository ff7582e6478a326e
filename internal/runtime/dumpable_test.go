package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckDumpable: processes in init's time namespace are dumpable.
func TestCheckDumpable(t *testing.T) {
	self := os.Getpid()
	if err := CheckDumpable(self, []int{self, os.Getppid()}); err != nil {
		t.Errorf("own process: %v", err)
	}
}

// TestCheckDumpableRefuses gives CheckDumpable a process in a time
// namespace of its own: refused, by pid and name.
func TestCheckDumpableRefuses(t *testing.T) {
	requireRoot(t) // unshare(CLONE_NEWTIME)
	self := os.Getpid()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("unshare", "--time", "--fork", "--kill-child", "sh", "-c", "echo $$; exec sleep 30")
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pid int
	if _, err := fmt.Fscan(r, &pid); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGKILL) //nolint:errcheck // --kill-child too
	// It prints its pid before the exec: wait until it is sleep.
	waitFor(t, "the child to exec sleep", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.TrimSpace(string(b)) == "sleep"
	})
	err = CheckDumpable(self, []int{self, pid})
	if !errors.Is(err, ErrNotDumpable) || !strings.Contains(err.Error(), fmt.Sprintf("%d (sleep)", pid)) {
		t.Errorf("process in another time namespace: %v", err)
	}
	t.Logf("refusal (expected): %v", err)
}
