package qemu

// QEMU's loading thread during a mapped-ram load.
//
// QEMU 10's multifd_recv() hands each read to a channel by spinning over
// the channels until one is free (the send side waits on a semaphore), in
// the thread that runs the incoming migration's coroutine: QEMU's main
// thread (tid = pid). With the touched load (savefile_touch.go) the
// channels fault their reads' pages in themselves, and on a host with few
// CPUs that spinning thread takes the CPU their faults need. So Load puts
// the main thread under SCHED_IDLE once the channels' threads exist
// (threads inherit their creator's policy: set before, they would be idle
// too) and back under SCHED_OTHER when the migration has ended, failed or
// was cancelled, before Load returns (before the caller's cont).
//
// If vessel dies in between, the main thread may stay idle: a QEMU whose
// load fails is killed (the daemon's launch reverts), and a restarted
// daemon that adopts a QEMU (reconcile, which may let a paused one run)
// puts its main thread back as it finds it (ResetLoader, in the daemon's
// qemuRunner.Find).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// loaderWait bounds how long Load waits for the channels' threads; the
// poll is how often it looks.
const (
	loaderWait = 5 * time.Second
	loaderPoll = 2 * time.Millisecond
)

// loaderThread is what idleLoader needs of the loading QEMU: how many of
// its receive channels' threads exist, and its main thread's policy.
type loaderThread interface {
	recvThreads() (int, error)
	setIdle(idle bool) error
}

// procLoader is a QEMU process's main thread, seen through /proc.
type procLoader int

func (p procLoader) recvThreads() (int, error) {
	comms, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(int(p)), "task", "*", "comm"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.HasPrefix(string(b), "mig/dst/recv_") {
			n++
		}
	}
	return n, nil
}

func (p procLoader) setIdle(idle bool) error {
	policy := uint32(unix.SCHED_NORMAL)
	if idle {
		policy = unix.SCHED_IDLE
	}
	if err := unix.SchedSetAttr(int(p), &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy}, 0); err != nil {
		return fmt.Errorf("scheduling policy of pid %d: %w", int(p), err)
	}
	return nil
}

// idleLoader waits until channels receive threads exist in t, then puts
// t's main thread under SCHED_IDLE; it gives up (leaving the policy) at
// ctx's end, which Load's reset follows. It reports whether it set it.
func idleLoader(ctx context.Context, t loaderThread, channels int) bool {
	tick := time.NewTicker(loaderPoll)
	defer tick.Stop()
	for {
		if n, err := t.recvThreads(); err == nil && n >= channels {
			return t.setIdle(true) == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// duringLoad runs load (the migration) with t's main thread idle once the
// channels run, and puts it back under SCHED_OTHER before it returns,
// whatever load returned, when it set it (a thread it did not change it
// leaves alone); a failure to put it back fails the load (the caller then
// kills QEMU rather than run the VM).
func duringLoad(t loaderThread, channels int, load func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), loaderWait)
	done := make(chan bool, 1)
	go func() { done <- idleLoader(ctx, t, channels) }()
	err := load()
	cancel()
	if <-done {
		if rerr := t.setIdle(false); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// ResetLoader puts QEMU process pid's main thread back under SCHED_OTHER:
// for a QEMU adopted at daemon start, whose load (and Load's own reset)
// the daemon's death may have interrupted.
func ResetLoader(pid int) error {
	if pid <= 0 { // 0 would be the caller's own thread
		return fmt.Errorf("scheduling policy: no pid")
	}
	return procLoader(pid).setIdle(false)
}
