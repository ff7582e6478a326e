package integration

import (
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/vesselhost/vessel/internal/testutil"
)

// TestExecTerminal runs `vessel exec` inside a real pseudo-terminal, as a
// user at a shell would: the command gets a terminal of the user's size,
// and a resize of the user's terminal reaches it.
func TestExecTerminal(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "tty1")

	cmd := exec.Command(filepath.Join(binDir, "vessel"), "exec", "tty1", "--",
		"sh", "-c", "tty; stty size; read line; stty size; echo got:$line")
	cmd.Env = h.Env()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out testutil.SyncBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, ptmx); close(copied) }()

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "30 100") {
		if time.Now().After(deadline) {
			t.Fatalf("no terminal size in the output after 30s: %q", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the resize travel before input
	if _, err := ptmx.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("vessel exec: %v\n%s", err, out.String())
	}
	<-copied
	got := out.String()
	for _, want := range []string{"/dev/pts/", "30 100", "40 120", "got:hello"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, got)
		}
	}
	// Without a terminal on our side, -t still gives the command one.
	if r := h.Vessel("exec", "-t", "tty1", "--", "tty"); r.Code != 0 || !strings.Contains(r.Stdout, "/dev/pts/") {
		t.Errorf("exec -t: %s", r)
	}
	if r := h.Vessel("exec", "tty1", "--", "tty"); r.Code == 0 {
		t.Errorf("exec without terminal has one: %s", r)
	}
}
