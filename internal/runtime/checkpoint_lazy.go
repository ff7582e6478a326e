package runtime

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A lazy dump (post-copy) writes every image but the memory pages, then
// CRIU serves the pages from a page server until its client (the target's
// `criu lazy-pages`) has them all. Meanwhile CRIU keeps the container's
// tasks seized.
//
// The page server listens on no port: it serves one end of a socket pair
// CRIU inherits (`ps-socket`, read by CRIU from a config file of the
// dump's, as RPC requests cannot pass a lazy dump's socket), and vessel
// holds the other end (PageConn), which only it can use. Closing vessel's
// end (Abort, or this process dying) is the client hanging up: the page
// server takes it for a client that has everything, ends, and CRIU lets
// go of the tasks.

// hangUpTimeout bounds the connection to an old page server's TCP port
// to hang up on (ReleaseLazyDump).
const hangUpTimeout = 5 * time.Second

// PageServerSocket is what a migration journal records for a lazy dump's
// page server served on a socket pair (ReleaseLazyDump's addr).
const PageServerSocket = "socket"

// lazyDump is a lazy dump's page server socket and the pipe on which CRIU
// reports that the page server is up.
type lazyDump struct {
	conn   *net.UnixConn // vessel's end
	criu   *os.File      // CRIU's end, closed here once CRIU has it
	config string        // CRIU config file naming CRIU's end

	mu   sync.Mutex
	r, w *os.File // status pipe; nil once closed
}

// newLazyDump makes the page server's socket pair, the config file that
// hands CRIU its end (in work), and the status pipe.
func newLazyDump(work string) (_ *lazyDump, err error) {
	ld := &lazyDump{config: filepath.Join(work, "lazy-dump.conf")}
	defer func() {
		if err != nil {
			ld.close()
		}
	}()
	if ld.conn, ld.criu, err = socketPair("page-server"); err != nil {
		return nil, fmt.Errorf("page server socket: %w", err)
	}
	conf := fmt.Sprintf("ps-socket %d\n", criuInheritedFd)
	if err := os.WriteFile(ld.config, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if ld.r, ld.w, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	return ld, nil
}

// socketPair returns both ends of a new connected unix stream socket pair
// (close-on-exec): one as a connection, the other as a file to hand to a
// child process.
func socketPair(name string) (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	ours := os.NewFile(uintptr(fds[0]), name)
	defer ours.Close() // FileConn holds a duplicate
	theirs := os.NewFile(uintptr(fds[1]), name)
	c, err := net.FileConn(ours)
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c.(*net.UnixConn), theirs, nil
}

// SocketPair returns both ends of a new connected unix stream socket pair
// for a post-copy page stream: the connection stays in this process, the
// file goes to `criu lazy-pages` (LazyPagesOptions.PageServer).
func SocketPair() (*net.UnixConn, *os.File, error) { return socketPair("lazy-pages") }

// opts is what a dump request needs of ld (nil without a lazy dump).
func (ld *lazyDump) opts() *lazyOpts {
	if ld == nil {
		return nil
	}
	return &lazyOpts{config: ld.config, status: ld.w}
}

// closeFile closes *f once, under ld's lock.
func (ld *lazyDump) closeFile(f **os.File) { closeOnce(&ld.mu, f) }

// closeOnce closes *f and clears it under mu: a status pipe's ends are
// closed from the dump's goroutine and its watcher, whichever comes first.
func closeOnce(mu *sync.Mutex, f **os.File) {
	mu.Lock()
	defer mu.Unlock()
	if *f != nil {
		(*f).Close()
		*f = nil
	}
}

// close closes both ends of the status pipe and of the page server's
// socket (the client hanging up, if the page server runs).
func (ld *lazyDump) close() {
	ld.closeFile(&ld.r)
	ld.closeFile(&ld.w)
	ld.closeFile(&ld.criu)
	ld.hangUp()
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

// hangUp closes vessel's end of the page server's socket: a page server
// ends as when its client has every page.
func (ld *lazyDump) hangUp() {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.conn != nil {
		ld.conn.Close()
	}
}

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

// ReleaseLazyDump waits until a lazy dump that a crashed process left
// behind has let go of the container's tasks: its page server ended when
// the process's end of the page server socket closed with it. It waits up
// to 30 s until no task among pids() (the container's, read anew on every
// check) is traced any more. addr is the journal's record of the page
// server: a TCP address (written by a vessel that served pages on a
// loopback port) is connected to and hung up on first.
func ReleaseLazyDump(addr string, pids func() ([]int, error)) error {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		if c, err := net.DialTimeout("tcp", addr, hangUpTimeout); err == nil {
			c.Close()
		}
	}
	deadline := time.Now().Add(releaseTimeout)
	for {
		ps, err := pids()
		if err != nil {
			return fmt.Errorf("%w: release the lazy dump: %w", ErrCheckpoint, err)
		}
		traced := tracedAmong(ps)
		if traced == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: release the lazy dump: task %d still traced after %s",
				ErrCheckpoint, traced, releaseTimeout)
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
