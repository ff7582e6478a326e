package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// send writes vol as a btrfs send stream to w: `btrfs send [-p PARENT]
// VOL`, the difference from parent if not nil. Both volumes must be
// read-only.
func (d *btrfsDriver) send(ctx context.Context, vol Volume, parent *Volume, w io.Writer) error {
	if err := d.checkMounted(); err != nil {
		return err
	}
	if err := checkExisting(vol, d.Path(vol)); err != nil {
		return fmt.Errorf("send %s: %w", vol, err)
	}
	args := []string{"send", "-q"}
	if parent != nil {
		if err := checkExisting(*parent, d.Path(*parent)); err != nil {
			return fmt.Errorf("send %s: parent: %w", vol, err)
		}
		args = append(args, "-p", d.Path(*parent))
	}
	args = append(args, d.Path(vol))
	if err := d.tool.stream(ctx, args, nil, w, nil); err != nil {
		return fmt.Errorf("send %s: %w", vol, err)
	}
	return nil
}

// receive reads a btrfs send stream from r into the new read-only volume
// vol with `btrfs receive --chroot -e DIR`, jailed (see jailedStart) and
// behind a sendChecker. The stream names the subvolume it creates in vol's
// directory: it must be vol's last name element, or nothing is received
// (ErrTransferFormat). A failed receive leaves nothing.
func (d *btrfsDriver) receive(ctx context.Context, vol Volume, r io.Reader) error {
	path, err := d.newVolumePath(vol)
	if err != nil {
		return err
	}
	head, name, err := readSendHead(r)
	if err == nil && name != filepath.Base(path) {
		err = fmt.Errorf("the stream holds subvolume %q, want %q: %w", name, filepath.Base(path), ErrTransferFormat)
	}
	if err != nil {
		_ = removeEmptyParent(vol, path)
		return fmt.Errorf("receive %s: %w", vol, err)
	}
	checker := newSendChecker(r)
	r = io.MultiReader(bytes.NewReader(head), checker)
	dir := filepath.Dir(path)
	// dir is snapshots/NAME: the jail shows the pool with nothing else.
	rel, err := filepath.Rel(d.root, dir)
	top, keep, ok := strings.Cut(rel, "/")
	if err != nil || !ok || top == ".." || strings.Contains(keep, "/") {
		return fmt.Errorf("receive %s: %s is not two levels below the pool", vol, dir)
	}
	jail := func(cmd *exec.Cmd) error { return jailedStart(cmd, d.root, top, keep) }
	if err := d.tool.stream(ctx, []string{"receive", "--chroot", "-e", dir}, r, io.Discard, jail); err != nil {
		if checker.err != nil && !errors.Is(checker.err, io.EOF) {
			// The checker cut the stream: its reason, not btrfs's.
			err = checker.err
		}
		// btrfs leaves a half-received subvolume behind: remove it.
		if derr := d.DeleteVolume(context.WithoutCancel(ctx), vol); derr != nil {
			err = fmt.Errorf("%w (and removing what it left: %w)", err, derr)
		}
		_ = removeEmptyParent(vol, path)
		return fmt.Errorf("receive %s: %w", vol, err)
	}
	if ok, _ := pathExists(path); !ok {
		return fmt.Errorf("receive %s: the stream made no subvolume %q: %w", vol, filepath.Base(path), ErrTransferFormat)
	}
	return nil
}

// stream runs btrfs with stdin from r (if not nil) and stdout to w; the
// error carries the tool's stderr. start, if not nil, starts the command
// (a jail) instead of cmd.Start.
func (b btrfsTool) stream(ctx context.Context, args []string, r io.Reader, w io.Writer, start func(*exec.Cmd) error) error {
	bin, err := exec.LookPath(b.btrfsBin)
	if err != nil {
		return fmt.Errorf("btrfs %s: %w", strings.Join(args, " "), err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, w, &stderr
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err = start(cmd); err == nil {
		err = cmd.Wait()
	} else if cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
