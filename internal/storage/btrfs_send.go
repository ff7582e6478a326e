package storage

import (
	"bytes"
	"context"
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
	if err := d.tool.stream(ctx, args, nil, w); err != nil {
		return fmt.Errorf("send %s: %w", vol, err)
	}
	return nil
}

// receive reads a btrfs send stream from r into the new read-only volume
// vol with `btrfs receive -e DIR`. The stream names the subvolume it
// creates in vol's directory: it must be vol's last name element, or
// nothing is received (ErrTransferFormat). A failed receive leaves nothing.
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
	r = io.MultiReader(bytes.NewReader(head), r)
	if err := d.tool.stream(ctx, []string{"receive", "-e", filepath.Dir(path)}, r, io.Discard); err != nil {
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
// error carries the tool's stderr.
func (b btrfsTool) stream(ctx context.Context, args []string, r io.Reader, w io.Writer) error {
	cmd := exec.CommandContext(ctx, b.btrfsBin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
