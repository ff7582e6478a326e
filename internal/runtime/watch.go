package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/shim"
)

// Exit is how a container's init ended.
type Exit struct {
	// Status is init's exit code, or 128+signal when a signal killed it; -1
	// when unknown (then Err says why).
	Status int
	// Signal names the signal that killed init ("SIGKILL"), or is empty.
	Signal string
	// Time is when the shim saw init end.
	Time time.Time
	// Err is set when the shim left no exit record (it was killed, or the
	// state directory is gone).
	Err error
}

// errShimGone says no live shim belongs to a container.
var errShimGone = errors.New("shim not running")

// Watch delivers one Exit on the returned channel when the shim of container
// id ends, then closes the channel. It works for containers started by an
// earlier Runtime (after a daemon restart). If the shim has already ended,
// the recorded exit is delivered at once.
//
// It waits on a pidfd of the shim through Go's poller: no thread blocks and
// a reused pid cannot be mistaken for the shim.
func (r *Runtime) Watch(id string) (<-chan Exit, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if _, err := os.Stat(r.dir(id)); err != nil {
		return nil, fmt.Errorf("%w: %s has no state directory", ErrNotFound, id)
	}
	ch := make(chan Exit, 1)
	fd, err := r.openShim(id)
	if err != nil {
		// No shim to watch: it ended, and its exit record tells how.
		ch <- r.readExit(id)
		close(ch)
		return ch, nil //nolint:nilerr // see above
	}
	go func() {
		defer close(ch)
		if err := waitPidfd(fd); err != nil {
			ch <- Exit{Status: -1, Err: fmt.Errorf("watch shim of %s: %w", id, err)}
			return
		}
		ch <- r.readExit(id)
	}()
	return ch, nil
}

// readExit returns the exit recorded in the state directory.
func (r *Runtime) readExit(id string) Exit {
	e, err := shim.ReadExit(r.dir(id))
	if err != nil {
		return Exit{Status: -1, Err: fmt.Errorf("no exit record for %s: %w", id, err)}
	}
	return Exit{Status: e.Status, Signal: e.Signal, Time: e.Time}
}

// openShim returns a non-blocking pidfd on the live shim of container id,
// or errShimGone. The shim is found by its pid file and recognised by its
// command line (vessel-shim <state-dir>/shim.json), checked after the pidfd
// is open so that the pidfd cannot refer to a process that reused the pid.
func (r *Runtime) openShim(id string) (int, error) {
	b, err := os.ReadFile(filepath.Join(r.dir(id), shim.ShimPidFile))
	if err != nil {
		return -1, errShimGone
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return -1, errShimGone
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return -1, errShimGone
	}
	// A zombie has an empty command line: it is gone as far as we care.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})
	want := filepath.Join(r.dir(id), shim.ConfigFile)
	if err != nil || len(args) != 2 || string(args[1]) != want || pidfdExited(fd) {
		closeFd(fd)
		return -1, errShimGone
	}
	return fd, nil
}

// pidfdExited tells whether the process of a pidfd has ended: a pidfd
// polls readable once its process has exited.
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// waitPidfd waits, without holding a thread, until the process of pidfd fd
// has ended, and closes fd.
func waitPidfd(fd int) error {
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	// Returning false makes the poller wait for the next readiness event
	// (epoll reports EPOLLIN on a pidfd when its process exits).
	return rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) })
}

func closeFd(fd int) {
	unix.Close(fd) //nolint:errcheck // nothing to do about it
}
