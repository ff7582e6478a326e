package runtime

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A lazy dump (post-copy) writes every image but the memory pages, then
// CRIU serves the pages from a page server until its client (the target's
// `criu lazy-pages`) has them all. Meanwhile CRIU keeps the container's
// tasks seized: a dump nobody will fetch from is ended by connecting to
// the page server and hanging up at once, which it takes for a client that
// has everything.

// hangUpTimeout bounds the connection to a page server to hang up on.
const hangUpTimeout = 5 * time.Second

// lazyDump is a lazy dump's page server address and the pipe on which
// CRIU reports that the page server listens.
type lazyDump struct {
	addr string

	mu   sync.Mutex
	r, w *os.File // status pipe; nil once closed
}

// newLazyDump picks a free loopback port for the page server and makes
// the status pipe.
func newLazyDump() (*lazyDump, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("page server port: %w", err)
	}
	ld := &lazyDump{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if ld.r, ld.w, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	return ld, nil
}

// freePort returns a TCP port on the loopback interface nobody listens on
// now. (Someone may take it before CRIU does: CRIU's bind then fails and
// so does the dump, before anything was lost.)
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// opts is what a dump request needs of ld (nil without a lazy dump).
func (ld *lazyDump) opts() *lazyOpts {
	if ld == nil {
		return nil
	}
	return &lazyOpts{pageServer: ld.addr, status: ld.w}
}

// closeFile closes *f once, under ld's lock.
func (ld *lazyDump) closeFile(f **os.File) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if *f != nil {
		(*f).Close()
		*f = nil
	}
}

// close closes both ends of the status pipe.
func (ld *lazyDump) close() {
	ld.closeFile(&ld.r)
	ld.closeFile(&ld.w)
}

// awaitReady waits for CRIU's '\0' on the status pipe and closes our read
// end: false means EOF (CRIU, and our write end, closed without it).
func (ld *lazyDump) awaitReady() bool {
	ld.mu.Lock()
	r := ld.r
	ld.mu.Unlock()
	if r == nil {
		return false
	}
	n, _ := r.Read(make([]byte, 1))
	ld.closeFile(&ld.r)
	return n == 1
}

// hangUp ends ld's page server (see hangUp).
func (ld *lazyDump) hangUp() { hangUp(ld.addr) }

// runLazy is Run of a lazy dump: CRIU runs in the background, and Run
// returns once the page server listens, or once the dump has failed.
func (c *Checkpoint) runLazy() error {
	go func() {
		err := c.dump()
		// CRIU has exited: with our write end closed the reader sees EOF
		// if CRIU never reported ready.
		c.lazy.closeFile(&c.lazy.w)
		c.end(err, nil)
	}()
	if c.lazy.awaitReady() {
		c.mu.Lock()
		if c.state == checkpointRunning {
			c.state = checkpointServing
		}
		c.mu.Unlock()
		return nil
	}
	<-c.done
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("%w %s: criu never reported its page server ready%s", ErrCheckpoint, c.id,
		criuLogErrors(filepath.Join(c.opts.WorkPath, "dump.log")))
}

// hangUp connects to a lazy dump's page server and closes at once: the
// page server takes it for a lazy-pages client that has everything, and
// ends. A page server that is gone already is not an error.
func hangUp(pageServer string) {
	if c, err := net.DialTimeout("tcp", pageServer, hangUpTimeout); err == nil {
		c.Close()
	}
}

// ReleaseLazyDump ends the page server of a lazy dump that a crashed
// process left behind (it holds the container's tasks seized until a
// client has fetched every page) by connecting to addr and hanging up,
// then waits up to 30 s until no task among pids() (the container's, read
// anew on every check) is traced any more. A page server that is already
// gone is not an error.
func ReleaseLazyDump(addr string, pids func() ([]int, error)) error {
	hangUp(addr)
	deadline := time.Now().Add(releaseTimeout)
	for {
		ps, err := pids()
		if err != nil {
			return fmt.Errorf("%w: release the lazy dump at %s: %w", ErrCheckpoint, addr, err)
		}
		traced := tracedAmong(ps)
		if traced == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: release the lazy dump at %s: task %d still traced after %s",
				ErrCheckpoint, addr, traced, releaseTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tracedAmong returns a task among pids that is under ptrace (CRIU's
// seize), or 0. Tasks that are gone count as untraced.
func tracedAmong(pids []int) int {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				return pid
			}
		}
	}
	return 0
}
