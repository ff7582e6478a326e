package cgroups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// freezeV1 freezes a v1 freezer cgroup: one write of FROZEN, then the
// state polled with short sleeps until every task is frozen.
//
// runc's v1 freezer (which the library's manager uses) rewrites FROZEN in
// a busy loop and, every 50 rounds, thaws and sleeps 10 ms. On a loaded
// host with few CPUs the spinning writer takes the CPU the container's
// runnable tasks need to reach their freezing point, and the thaw restarts
// the freeze: a live move's freeze took 0.3 ms or 13-24 ms at random. The
// kernel freezes tasks forked while the cgroup is FREEZING itself
// (freezer_fork), so no thaw is needed; FROZEN is written again now and
// then in case a task slipped past the first round.
func freezeV1(ctx context.Context, dir string) error {
	state := filepath.Join(dir, "freezer.state")
	write := func(s string) error { return os.WriteFile(state, []byte(s), 0) }
	if err := write("FROZEN"); err != nil {
		return err
	}
	sleep := 20 * time.Microsecond
	rewrite := time.Now().Add(10 * time.Millisecond)
	for {
		b, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		switch s := strings.TrimSpace(string(b)); s {
		case "FROZEN":
			return nil
		case "FREEZING":
		default:
			return fmt.Errorf("unexpected state %s while freezing", s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		if sleep < time.Millisecond {
			sleep *= 2
		}
		if time.Now().After(rewrite) {
			if err := write("FROZEN"); err != nil {
				return err
			}
			rewrite = time.Now().Add(10 * time.Millisecond)
		}
	}
}
