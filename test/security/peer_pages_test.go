package security

import (
	"bufio"
	"fmt"
	"io/fs"
	"maps"
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
	w := newSocketWatch(t, dial)
	var res testhost.Result
watch:
	for {
		select {
		case res = <-done:
			break watch
		default:
		}
		w.sweep(daemons, listening, c.Host("alpha").RunDir(), c.Host("beta").RunDir())
		time.Sleep(5 * time.Millisecond)
	}
	tried, problems := w.finish()
	if res.Code != 0 {
		t.Fatalf("the move failed: %s", res.Stderr)
	}
	if w.seen == 0 {
		t.Fatalf("never saw the post-copy (criu lazy-pages) running in %d sweeps of /proc: nothing was checked", w.sweeps)
	}
	t.Logf("checked the sockets of criu and vesseld in %d of %d sweeps while criu lazy-pages ran", w.seen, w.sweeps)
	denied := 0
	for path, out := range tried {
		t.Logf("as nobody: %s", out)
		switch {
		case !strings.Contains(out, " refused: "):
			problems = append(problems, "uid nobody connected to "+path+": "+out)
		case strings.Contains(out, "permission denied"):
			denied++
		}
	}
	// Refused for another reason (the socket gone, nothing listening any
	// more) checks nothing: at least the sockets that outlive a dial must
	// have been denied to nobody.
	if denied == 0 {
		problems = append(problems, fmt.Sprintf("no socket was denied to uid nobody (of %d tried): nothing was checked", len(tried)))
	}
	for _, p := range problems {
		t.Error(p)
	}
	if got := c.Host("beta").VerifyMemhog("big"); got != "ok" {
		t.Errorf("memhog's memory after the post-copy move: %s", got)
	}
}

// socketWatch is the test's watcher over a move. sweep (the test's loop,
// every 5 ms) only reads /proc and the run directories; the unix sockets it
// finds are dialed as nobody by a goroutine of their own, many per dialer
// run. Dialing is a process start as another user, which takes a good part
// of a second on an emulated (TCG) guest; done inside the sweep, as it was,
// a few new sockets stalled the sweeps for longer than the post-copy's
// criu lazy-pages lived there, and the test never saw it.
type socketWatch struct {
	t      *testing.T
	dial   string
	seen   int // sweeps that found criu lazy-pages running
	sweeps int

	queued   map[string]bool
	problems []string
	paths    chan string
	dialed   chan map[string]string
}

func newSocketWatch(t *testing.T, dial string) *socketWatch {
	w := &socketWatch{t: t, dial: dial, queued: map[string]bool{}, paths: make(chan string, 4096), dialed: make(chan map[string]string, 1)}
	go w.dialer()
	return w
}

// sweep looks once at every criu process, the daemons' TCP listeners and
// the socket files under the run directories.
func (w *socketWatch) sweep(daemons []int, listening map[int]map[string]bool, runDirs ...string) {
	w.sweeps++
	lazy := false
	for _, pid := range criuProcesses() {
		lazy = lazy || isLazyPages(pid)
		for ino := range tcpSockets(pid, false) {
			w.problems = append(w.problems, fmt.Sprintf("criu %d holds TCP socket %s", pid, ino))
		}
		for _, path := range unixSocketPaths(pid) {
			w.queue(path)
		}
	}
	if lazy {
		w.seen++
	}
	for _, dir := range runDirs {
		for _, path := range socketFiles(dir) {
			w.queue(path)
		}
	}
	for _, pid := range daemons {
		for ino := range tcpSockets(pid, true) {
			if !listening[pid][ino] {
				w.problems = append(w.problems, fmt.Sprintf("vesseld %d listens on a new TCP socket %s during the move", pid, ino))
			}
		}
	}
}

func (w *socketWatch) queue(path string) {
	if !w.queued[path] {
		w.queued[path] = true
		w.paths <- path
	}
}

// dialer dials what is queued, all of it in one run of the dialer, until
// the queue is closed.
func (w *socketWatch) dialer() {
	tried := map[string]string{}
	for path := range w.paths {
		batch := []string{path}
	more:
		for {
			select {
			case p, ok := <-w.paths:
				if !ok {
					break more
				}
				batch = append(batch, p)
			default:
				break more
			}
		}
		maps.Copy(tried, dialAsNobody(w.t, w.dial, batch))
	}
	w.dialed <- tried
}

// finish waits for the dials still queued and returns what each said and
// the problems the sweeps found.
func (w *socketWatch) finish() (map[string]string, []string) {
	close(w.paths)
	return <-w.dialed, w.problems
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

// dialAsNobody runs the dialer as uid/gid 65534 on the unix socket paths
// and returns its report line for each.
func dialAsNobody(t *testing.T, dial string, paths []string) map[string]string {
	args := make([]string, len(paths))
	for i, p := range paths {
		args[i] = "unix:" + p
	}
	cmd := exec.Command(dial, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("dialer: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	res := map[string]string{}
	for i, p := range paths {
		res[p] = "no report from the dialer"
		if i < len(lines) && strings.HasPrefix(lines[i], args[i]+" ") {
			res[p] = lines[i]
		}
	}
	return res
}

// socketFiles returns the unix socket files under dir, a daemon's run
// directory, but not in the containers' root filesystems and sysfs mounted
// there (RUN/rootfs, RUN/sysfs): no socket of vesseld's or CRIU's is in
// them, and walking a sysfs took a sweep half a second here and far longer
// in an emulated guest. (RUN/migrate, a tmpfs of vessel's own, is walked.)
func socketFiles(dir string) []string {
	var out []string
	skip := map[string]bool{filepath.Join(dir, "rootfs"): true, filepath.Join(dir, "sysfs"): true}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		// A file gone between the listing and the visit is no error here.
		if err == nil && d.IsDir() && skip[p] {
			return filepath.SkipDir
		}
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}
