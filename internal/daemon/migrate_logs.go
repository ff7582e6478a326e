package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/vesselhost/vessel/internal/migration"
)

// The console log moves with the container: after commit the source sends
// the log it wrote (rotated file first), and the target keeps it as the
// rotated file, which the log reader shows before what the container
// writes there.

// sendLogs sends the console log written here (the rotated file, then the
// current one): the target keeps it before what the container writes there.
func (m *migrationSource) sendLogs() error {
	if err := m.sess.Send(migration.Message{Type: migration.MsgLogs}); err != nil {
		return err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamLogs})
	if err != nil {
		return err
	}
	defer st.Close()
	path := m.d.cfg.logPath(m.name)
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		_, err = io.Copy(st, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// receiveLogs keeps the source's console log as the rotated file, which the
// log reader shows before the current one (what the container writes here).
func (m *migrationTarget) receiveLogs(ctx context.Context) error {
	st, err := m.nextStream(ctx, m.logsCh)
	if err != nil {
		return err
	}
	defer st.Close()
	f, err := os.OpenFile(m.d.cfg.logPath(m.name)+".1", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// The source's log is its rotated file and the current one, each
	// at most the shim's rotation size (1 MiB): more is not a console log.
	n, err := io.Copy(f, io.LimitReader(st, maxReceivedLog+1))
	if err == nil && n > maxReceivedLog {
		err = f.Truncate(maxReceivedLog)
		if err == nil {
			err = fmt.Errorf("the console log from the source is longer than %d bytes: kept its beginning", int64(maxReceivedLog))
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// maxReceivedLog bounds the console log a migration source sends.
const maxReceivedLog = 4 << 20
