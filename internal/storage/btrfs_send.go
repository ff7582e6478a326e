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

// send writes vol as a btrfs send stream to w, the difference from parent
// if not nil, as `btrfs send [-p PARENT] VOL` would, by ioctl (sendIoctl):
// the final pass of a live move is sent while the container is frozen.
// Both volumes must be read-only.
func (d *btrfsDriver) send(ctx context.Context, vol Volume, parent *Volume, w io.Writer) error {
	if err := d.checkMounted(); err != nil {
		return err
	}
	if err := checkExisting(vol, d.Path(vol)); err != nil {
		return fmt.Errorf("send %s: %w", vol, err)
	}
	var from string
	if parent != nil {
		if err := checkExisting(*parent, d.Path(*parent)); err != nil {
			return fmt.Errorf("send %s: parent: %w", vol, err)
		}
		from = d.Path(*parent)
	}
	if err := sendIoctl(ctx, d.Path(vol), from, w); err != nil {
		return fmt.Errorf("send %s: %w", vol, err)
	}
	return nil
}

// receive reads a btrfs send stream from r into the new read-only volume
// vol with `btrfs receive --chroot -e DIR`, jailed (see jailedStart) and
// behind a sendChecker: spare, if it was started for vol's directory, or
// one started now (a spare for another directory is ended). The stream
// names the subvolume it creates in vol's directory: it must be vol's last
// name element, or nothing is received (ErrTransferFormat). A failed
// receive leaves nothing.
func (d *btrfsDriver) receive(ctx context.Context, vol Volume, r io.Reader, spare *receiveProc) error {
	if spare != nil {
		defer spare.end() // a no-op once fed
	}
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
	proc := spare
	if proc != nil && proc.dir != dir {
		proc.end()
		proc = nil
	}
	if proc == nil {
		proc, err = d.startReceive(dir)
	}
	if err == nil {
		err = proc.feed(ctx, r)
	}
	if err != nil {
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

// receiveProc is a jailed `btrfs receive --chroot -e DIR` started before
// its stream arrives, reading it from a pipe: a migration target starts
// the final pass's while the container still runs
// (btrfsReceiver.PrepareNextPass), so the exec, the jail's mount namespace
// and its covers are not in the frozen window. Until it is fed it has made
// nothing: a btrfs receive that reads an empty stream (its pipe closed by
// end, or by this process's death) exits with an error and no subvolume.
type receiveProc struct {
	dir    string
	cmd    *exec.Cmd
	stdin  *os.File // the pipe's write end; nil once closed
	stderr bytes.Buffer
}

// startReceive starts the jailed btrfs receive for dir (snapshots/NAME: the
// jail shows the pool with nothing else).
func (d *btrfsDriver) startReceive(dir string) (*receiveProc, error) {
	rel, err := filepath.Rel(d.root, dir)
	top, keep, ok := strings.Cut(rel, "/")
	if err != nil || !ok || top == ".." || strings.Contains(keep, "/") {
		return nil, fmt.Errorf("%s is not two levels below the pool", dir)
	}
	// Not bound to a request's context: it waits for its stream past the
	// call that started it; feed and end stop it.
	cmd, err := d.tool.command(context.Background(), "receive", "--chroot", "-e", dir)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("btrfs receive: %w", err)
	}
	p := &receiveProc{dir: dir, cmd: cmd, stdin: pw}
	p.cmd.Stdin, p.cmd.Stderr = pr, &p.stderr
	err = jailedStart(p.cmd, d.root, top, keep)
	pr.Close()
	if err != nil {
		pw.Close()
		if p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		return nil, fmt.Errorf("btrfs receive: %w", err)
	}
	return p, nil
}

// feed writes the stream r to the process and waits for it; cancelling ctx
// kills it. The error carries btrfs's stderr.
func (p *receiveProc) feed(ctx context.Context, r io.Reader) error {
	stop := context.AfterFunc(ctx, func() { _ = p.cmd.Process.Kill() })
	defer stop()
	_, cerr := io.Copy(p.stdin, r)
	p.stdin.Close()
	p.stdin = nil
	err := p.cmd.Wait()
	if err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("btrfs receive --chroot -e %s: %w: %s", p.dir, err, strings.TrimSpace(p.stderr.String()))
	}
	return nil
}

// end stops a process never fed: its stream ends empty, and it is killed
// and reaped.
func (p *receiveProc) end() {
	if p.stdin == nil {
		return
	}
	p.stdin.Close()
	p.stdin = nil
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// command is btrfs with args, killed if ctx ends, its messages in English
// (they are matched and shown as they are).
func (b btrfsTool) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	bin, err := exec.LookPath(b.btrfsBin)
	if err != nil {
		return nil, fmt.Errorf("btrfs %s: %w", strings.Join(args, " "), err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd, nil
}
