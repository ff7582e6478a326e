package security

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/testhost"
)

// TestPostCopyPagesUnreachable: while a post-copy move runs, a local user
// (uid nobody) finds nothing to connect to that reaches the frozen
// container's memory: CRIU holds no TCP socket on either host, vesseld
// listens on nothing new, and every unix socket CRIU holds is refused to
// it. (Before, the page server and its tunnel listened on 127.0.0.1 ports
// anyone could connect to.) The move completes with every page intact.
func TestPostCopyPagesUnreachable(t *testing.T) {
	c := testhost.NewCluster(t, binDir, testhost.ClusterOptions{})
	memhog := filepath.Join(t.TempDir(), "memhog")
	if err := testhost.BuildMemhog(memhog); err != nil {
		t.Fatal(err)
	}
	// The dialer runs as nobody: its directory must be open to it.
	dialDir, err := os.MkdirTemp("", "vessel-dial-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dialDir) })
	dial := filepath.Join(dialDir, "dial")
	if pre, ok, err := testhost.Prebuilt("dial"); ok {
		if err != nil {
			t.Fatal(err)
		}
		dial = pre
	} else if out, err := exec.Command("go", "build", "-o", dial, "./testdata/dial").CombinedOutput(); err != nil {
		t.Fatalf("build the dialer: %v\n%s", err, out)
	}
	if err := os.Chmod(dialDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.OK("launch", "busybox", "alpha:big")
	c.Host("alpha").StartMemhog("big", memhog, 384)
	daemons := []int{c.Host("alpha").PID(), c.Host("beta").PID()}
	listening := map[int]map[string]bool{}
	for _, pid := range daemons {
		listening[pid] = tcpSockets(pid, true)
	}

	done := make(chan testhost.Result, 1)
	go func() { done <- c.Vessel("move", "alpha:big", "beta:", "--live", "--memory=lazy") }()
	seen, tried := 0, map[string]string{}
	var problems []string
	var res testhost.Result
watch:
	for {
		select {
		case res = <-done:
			break watch
		default:
		}
		for _, pid := range criuProcesses() {
			if isLazyPages(pid) {
				seen++
			}
			for ino := range tcpSockets(pid, false) {
				problems = append(problems, fmt.Sprintf("criu %d holds TCP socket %s", pid, ino))
			}
			for _, path := range unixSocketPaths(pid) {
				if _, ok := tried[path]; !ok {
					tried[path] = dialAsNobody(t, dial, "unix:"+path)
				}
			}
		}
		for _, h := range []*testhost.Host{c.Host("alpha"), c.Host("beta")} {
			for _, path := range socketFiles(h.RunDir()) {
				if _, ok := tried[path]; !ok {
					tried[path] = dialAsNobody(t, dial, "unix:"+path)
				}
			}
		}
		for _, pid := range daemons {
			for ino := range tcpSockets(pid, true) {
				if !listening[pid][ino] {
					problems = append(problems, fmt.Sprintf("vesseld %d listens on a new TCP socket %s during the move", pid, ino))
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res.Code != 0 {
		t.Fatalf("the move failed: %s", res.Stderr)
	}
	if seen == 0 {
		t.Fatal("never saw the post-copy (criu lazy-pages) running: nothing was checked")
	}
	t.Logf("checked the sockets of criu and vesseld %d times while criu lazy-pages ran", seen)
	for path, out := range tried {
		t.Logf("as nobody: %s", out)
		if !strings.Contains(out, "refused") {
			problems = append(problems, "uid nobody connected to "+path)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if got := c.Host("beta").VerifyMemhog("big"); got != "ok" {
		t.Errorf("memhog's memory after the post-copy move: %s", got)
	}
}

// criuProcesses returns the pids of running criu processes.
func criuProcesses() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "criu" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isLazyPages tells whether pid is `criu lazy-pages`.
func isLazyPages(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Contains(string(b), "lazy-pages\x00")
}

// socketInodes returns the inodes of pid's sockets.
func socketInodes(pid int) map[string]bool {
	out := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// tcpSockets returns the inodes of pid's TCP sockets (only the listening
// ones if listen), as its network namespace shows them.
func tcpSockets(pid int, listen bool) map[string]bool {
	mine := socketInodes(pid)
	out := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !mine[fs[9]] || (listen && fs[3] != "0A") {
				continue
			}
			out[fs[9]] = true
		}
	}
	return out
}

// unixSocketPaths returns the paths of pid's bound unix sockets.
func unixSocketPaths(pid int) []string {
	mine := socketInodes(pid)
	var out []string
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	for l := range strings.SplitSeq(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) >= 8 && mine[fs[6]] && strings.HasPrefix(fs[7], "/") {
			out = append(out, fs[7])
		}
	}
	return out
}

// dialAsNobody runs the dialer as uid/gid 65534 and returns its report.
func dialAsNobody(t *testing.T, dial string, addr string) string {
	cmd := exec.Command(dial, addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("dialer: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// socketFiles returns the unix socket files under dir.
func socketFiles(dir string) []string {
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}
