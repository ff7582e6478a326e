package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// Signal sends sig to the container's init only (runc kill). It fails with
// ErrNotRunning when init has ended and ErrNotFound when runc does not know
// the container.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if err := r.runc.Kill(ctx, id, int(sig), nil); err != nil {
		return runcError("signal", id, err, ErrRunc)
	}
	return nil
}

// Kill sends SIGKILL to every process of the container (runc kill --all).
// A container that is no longer running is not an error.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	err := r.runc.Kill(ctx, id, int(unix.SIGKILL), &gorunc.KillOpts{All: true})
	if err != nil {
		if err = runcError("kill", id, err, ErrRunc); !errors.Is(err, ErrNotRunning) {
			return err
		}
	}
	return nil
}

// Stop ends the container: it sends sig to init, waits up to timeout for the
// shim to exit, then kills every process of the container and waits again.
// It returns once the shim has exited (or ctx has ended).
func (r *Runtime) Stop(ctx context.Context, id string, sig syscall.Signal, timeout time.Duration) error {
	exits, err := r.Watch(id)
	if err != nil {
		return err
	}
	if err := r.Signal(ctx, id, sig); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exits:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	case <-timer.C:
	}
	if err := r.Kill(ctx, id); err != nil {
		return err
	}
	select {
	case <-exits:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// Delete removes the container whatever its state: runc delete --force
// (which kills a running container and removes its cgroups), then, once the
// shim has exited, the state directory. Deleting a container that does not
// exist is not an error.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	// A plain delete first: the usual caller's container has stopped,
	// and runc 1.4's --force costs ~100 ms more even then. --force only
	// for what still runs.
	if err := r.runc.Delete(ctx, id, &gorunc.DeleteOpts{}); err != nil && !notExist(err) {
		if err := r.runc.Delete(ctx, id, &gorunc.DeleteOpts{Force: true}); err != nil && !notExist(err) {
			return runcError("delete", id, err, ErrRunc)
		}
	}
	// The shim writes exit.json and the log until it ends.
	if exits, err := r.Watch(id); err == nil {
		select {
		case <-exits:
		case <-ctx.Done():
			return fmt.Errorf("delete %s: wait for shim: %w", id, ctx.Err())
		}
	}
	// Not into a restore's root a dead daemon left bound there.
	if err := r.ReleaseRestoreRoot(id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return nil
}

// runcError wraps a failed runc command with the matching sentinel, or
// with def. runc has no distinct exit codes; its messages are all there is.
func runcError(what, id string, err error, def error) error {
	msg := runcMessage(err)
	switch {
	case notExist(err):
		return fmt.Errorf("%w: %s %s: %s", ErrNotFound, what, id, msg)
	case strings.Contains(msg, "not running"):
		return fmt.Errorf("%w: %s %s: %s", ErrNotRunning, what, id, msg)
	default:
		return fmt.Errorf("%w: %s %s: %s", def, what, id, msg)
	}
}

// logMsg matches the message of a logrus text line, which is what runc
// prints on stderr: time="..." level=error msg="container does not exist".
var logMsg = regexp.MustCompile(`level=(?:error|fatal) msg="((?:[^"\\]|\\.)*)"`)

// runcMessage returns runc's error messages from a go-runc error, which
// holds runc's whole output, or the error text if there are none.
func runcMessage(err error) string {
	var msgs []string
	for _, m := range logMsg.FindAllStringSubmatch(err.Error(), -1) {
		if s, uerr := strconv.Unquote(`"` + m[1] + `"`); uerr == nil {
			msgs = append(msgs, s)
		}
	}
	if len(msgs) == 0 {
		return strings.TrimSpace(err.Error())
	}
	return strings.Join(msgs, "; ")
}
