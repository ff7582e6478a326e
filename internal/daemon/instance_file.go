package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/api"
)

// PushFile writes a file into an instance, atomically, owned and moded as
// the instance sees it. A container's is written into its root filesystem
// volume (running or not; an unprivileged container's volume holds its
// own ids, its idmapped mount shifts them), its links resolved inside it;
// a VM's (running) through its agent.
func (d *Daemon) PushFile(ctx context.Context, name, path string, r io.Reader, o api.FilePush) error {
	inst, err := d.instance(name)
	if err != nil {
		return err
	}
	fo := agent.FileOptions{Mode: o.Mode, UID: o.UID, GID: o.GID}
	if isVM(inst) {
		if err := actExec.allowed(inst, false); err != nil {
			return err
		}
		return d.agents.PushFile(ctx, name, d.vmAgentSocket(name), path, r, fo)
	}
	root := d.storage.Path(containerVolume(inst.name))
	if err := agent.WriteFile(root, path, r, fo); err != nil {
		if badPath(err) {
			return errorf(ErrInvalid, "push %s into %s: %v", path, name, err)
		}
		return fmt.Errorf("push %s into %s: %w", path, name, err)
	}
	return nil
}

// badPath tells a path the caller got wrong (not absolute, a missing or
// non-directory parent, a link loop, a directory in the way) from a
// failure of the host.
func badPath(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return true // WriteFile's own checks: the path is not absolute
	}
	for _, e := range []error{unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EISDIR, unix.EXDEV, unix.EACCES} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
