package qemu_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/qemu"
)

// TestMain makes this test binary a QEMU launcher too (as vesseld's main
// is), for TestNoTHPLauncher and the no-THP load of TestSaveLoadRoundTrip.
func TestMain(m *testing.M) {
	if qemu.IsNoTHPLaunch(os.Args) {
		os.Stderr.WriteString(qemu.ExecNoTHP(os.Args).Error() + "\n")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestIsNoTHPLaunch(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"vesseld", qemu.NoTHPArg, "qemu-system-x86_64"}, true},
		{[]string{"vesseld", qemu.NoTHPArg}, false},
		{[]string{"vesseld", "--debug", qemu.NoTHPArg, "x"}, false},
		{[]string{"vesseld"}, false},
	} {
		if got := qemu.IsNoTHPLaunch(c.args); got != c.want {
			t.Errorf("IsNoTHPLaunch(%q) = %v", c.args, got)
		}
	}
}

// TestNoTHPLauncher runs a process through this binary as the launcher:
// the process it execs has transparent huge pages off, this one not.
func TestNoTHPLauncher(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if off, err := qemu.THPDisabled(os.Getpid()); err != nil || off {
		t.Fatalf("this test process: THP disabled %v (%v)", off, err)
	}
	cmd := exec.Command(exe, qemu.NoTHPArg, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The launcher execs sleep at once; wait for it to be sleep.
	for i := 0; ; i++ {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		if string(b) == "sleep\n" {
			break
		}
		if i > 500 {
			t.Fatalf("the launcher did not exec sleep (comm %q)", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	off, err := qemu.THPDisabled(cmd.Process.Pid)
	if err != nil || !off {
		t.Errorf("launched process: THP disabled %v (%v), want true", off, err)
	}

	// A launch of something not there fails with the launcher's message.
	out, err := exec.Command(exe, qemu.NoTHPArg, "/nonexistent/qemu").CombinedOutput()
	if err == nil || !strings.Contains(string(out), qemu.NoTHPArg) {
		t.Errorf("launch of a missing binary: %v, %q", err, out)
	}
}
