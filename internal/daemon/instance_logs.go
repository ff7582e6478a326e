package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"time"
)

// Logs writes an instance's console log (init's output) to w: the rotated
// file first, then the current one. With follow it keeps writing what is
// appended until ctx ends.
func (d *Daemon) Logs(ctx context.Context, name string, follow bool, w io.Writer) error {
	if _, err := d.instance(name); err != nil {
		return err
	}
	path := d.cfg.logPath(name)
	if f, err := os.Open(path + ".1"); err == nil {
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if !follow {
			return nil
		}
		// Not started yet: wait for the file to appear.
		for errors.Is(err, os.ErrNotExist) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			f, err = os.Open(path)
		}
	}
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	flush := func() {
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
	}
	for {
		if _, err := io.Copy(w, f); err != nil {
			return err
		}
		flush()
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
		// The shim rotates the file when it grows too big: reopen then.
		if st, err := os.Stat(path); err == nil {
			if cur, err := f.Stat(); err == nil && !os.SameFile(st, cur) {
				f.Close()
				if f, err = os.Open(path); err != nil {
					return err
				}
			}
		}
	}
}
