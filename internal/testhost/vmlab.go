package testhost

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The guest lane: Debian 13 guests of the host image (make host-image)
// booted by scripts/vmlab under QEMU (KVM where the CPU has it, TCG
// otherwise), each a systemd host with cgroup v2 and the vessel .deb
// installed. Lab drives the script; tests run commands in the guests over
// its SSH channel.

// ExitNoQEMU is scripts/vmlab's exit status when QEMU itself cannot start
// on this machine: the lane is then skipped, with the script's one line.
const ExitNoQEMU = 77

// Lab is a set of running guests named vm1..vmN.
type Lab struct {
	t      T
	script string
	hosts  []string
}

// skipper is the part of *testing.T a skipped lane needs.
type skipper interface {
	Skipf(format string, args ...any)
}

// RepoRoot returns the module's root directory.
func RepoRoot() (string, error) {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(mod))), nil
}

// StartLab boots n guests (scripts/vmlab up n) and shuts them down at
// cleanup. Where QEMU cannot start it skips the test with the script's
// reason; any other failure fails it.
func StartLab(t T, n int) *Lab {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("%v", err)
	}
	l := &Lab{t: t, script: filepath.Join(root, "scripts", "vmlab")}
	start := time.Now()
	out, err := l.run("up", fmt.Sprint(n))
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == ExitNoQEMU {
		if s, ok := t.(skipper); ok {
			s.Skipf("guest lane skipped: %s", lastLine(out))
		}
		t.Fatalf("guest lane: QEMU cannot start: %s", lastLine(out))
	}
	t.Cleanup(func() {
		if out, err := l.run("down"); err != nil {
			t.Errorf("vmlab down: %v\n%s", err, out)
		}
	})
	if err != nil {
		t.Fatalf("vmlab up %d: %v\n%s", n, err, out)
	}
	t.Logf("vmlab up %d took %s:\n%s", n, time.Since(start).Round(time.Second), out)
	for i := 1; i <= n; i++ {
		l.hosts = append(l.hosts, fmt.Sprintf("vm%d", i))
	}
	return l
}

// Hosts returns the guests' names.
func (l *Lab) Hosts() []string { return l.hosts }

func (l *Lab) run(args ...string) (string, error) {
	var b bytes.Buffer
	cmd := exec.Command(l.script, args...)
	cmd.Stdout, cmd.Stderr = &b, &b
	cmd.Env = os.Environ()
	err := cmd.Run()
	return b.String(), err
}

// Exec runs a shell command line in a guest and returns its combined
// output.
func (l *Lab) Exec(host, cmdline string) (string, error) {
	return l.run("exec", host, cmdline)
}

// OK runs a shell command line in a guest and fails the test unless it
// exits 0.
func (l *Lab) OK(host, cmdline string) string {
	l.t.Helper()
	out, err := l.Exec(host, cmdline)
	if err != nil {
		l.t.Fatalf("%s: %s: %v\n%s", host, cmdline, err, out)
	}
	return out
}

// Copy copies a file between this machine and a guest (HOST:PATH on
// either side).
func (l *Lab) Copy(src, dst string) {
	l.t.Helper()
	if out, err := l.run("cp", src, dst); err != nil {
		l.t.Fatalf("vmlab cp %s %s: %v\n%s", src, dst, err, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
