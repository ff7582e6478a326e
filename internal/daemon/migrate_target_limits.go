package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/trust"
)

// A peer may only migrate containers in, and what it sends is bounded: an
// incoming session must have its container running here within
// Config.MigrationTimeout of its Hello (each session holds a name and an
// address until then); a peer has at most Config.MigrationSessions
// sessions at once; the checkpoint images and page files of a session
// (they land in RunDir, a tmpfs) may not exceed the container's
// limits.memory plus migrationImageSlack, or Config.MigrationImageLimit
// without one; a session opens at most migrationMaxStreams data streams.
// Removing a peer's certificate (vessel trust remove) ends its sessions:
// one not yet running its container here is rolled back (the source
// resumes it).

// migrationImageSlack is room for the images other than memory pages
// (process trees, files, sockets: kilobytes to a few MiB).
const migrationImageSlack = 64 << 20

// migrationMaxStreams bounds the data streams of one session: disk passes,
// image sets, one page file per dumped process, the page tunnel, logs.
const migrationMaxStreams = 16384

// Errors of the limits, for tests and the operation's message.
var (
	errSessionDeadline = errors.New("the migration session ran out of time")
	errPeerRevoked     = errors.New("the peer's certificate was removed from this host's trust store")
	errImageBudget     = errors.New("the migration's checkpoint images are too big")
)

// migrationLinger is how long a target that ends a session with an error
// waits for the peer to hang up first (so the error reaches it).
const migrationLinger = 5 * time.Second

// migrationPageStreams is how many page files a session receives at once.
const migrationPageStreams = 16

// incomingSessions tracks the live incoming sessions of each peer
// certificate (by fingerprint).
type incomingSessions struct {
	mu     sync.Mutex
	byPeer map[string]map[*incoming]struct{}
}

// incoming is one live incoming session.
type incoming struct {
	sess *migration.Session

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the operation's, once it runs
	cause  error                   // why it was ended, if it was
}

// bind gives in the operation's cancel (called at once if in was ended
// before).
func (in *incoming) bind(cancel context.CancelCauseFunc) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cancel = cancel
	if in.cause != nil {
		cancel(in.cause)
	}
}

// end cancels the session's operation with cause and closes the session.
func (in *incoming) end(cause error) {
	if in.sess != nil {
		in.sess.SendError(cause) // first: cancelling closes the session
	}
	in.mu.Lock()
	in.cause = cause
	if in.cancel != nil {
		in.cancel(cause)
	}
	in.mu.Unlock()
	if in.sess != nil {
		in.sess.Close()
	}
}

// add registers a session of peer fp, unless it has max already.
func (s *incomingSessions) add(fp string, in *incoming, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPeer == nil {
		s.byPeer = map[string]map[*incoming]struct{}{}
	}
	if n := len(s.byPeer[fp]); max > 0 && n >= max {
		return errorf(ErrConflict, "this peer has %d incoming migrations under way already (at most %d at once)", n, max)
	}
	if s.byPeer[fp] == nil {
		s.byPeer[fp] = map[*incoming]struct{}{}
	}
	s.byPeer[fp][in] = struct{}{}
	return nil
}

// remove forgets a session that ended.
func (s *incomingSessions) remove(fp string, in *incoming) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byPeer[fp], in)
	if len(s.byPeer[fp]) == 0 {
		delete(s.byPeer, fp)
	}
}

// revoke ends every session of peer fp and returns how many there were.
func (s *incomingSessions) revoke(fp string) int {
	s.mu.Lock()
	ins := s.byPeer[fp]
	delete(s.byPeer, fp)
	s.mu.Unlock()
	for in := range ins {
		in.end(errPeerRevoked)
	}
	return len(ins)
}

// connFingerprint returns the fingerprint of the certificate the peer
// presented on conn (a TLS connection, possibly wrapped by the HTTP
// upgrade), or "".
func connFingerprint(conn any) string {
	cs, ok := conn.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return ""
	}
	if certs := cs.ConnectionState().PeerCertificates; len(certs) > 0 {
		return trust.Fingerprint(certs[0].Raw)
	}
	return ""
}

// imageLimit is how many bytes of checkpoint images and page files a
// session for a container with config cfg may store.
func (d *Daemon) imageLimit(cfg map[string]string) int64 {
	if v, ok := cfg[KeyMemory]; ok {
		if n, err := parseSize(v); err == nil && n > 0 {
			return n + migrationImageSlack
		}
	}
	return d.cfg.MigrationImageLimit
}

// imageBudget counts the image and page bytes a session stores against
// its limit (shared by concurrent page streams).
type imageBudget struct {
	mu    sync.Mutex
	used  int64
	limit int64
}

// give returns n bytes (files removed) to the budget.
func (b *imageBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// take accounts for n more bytes, or fails once the limit is passed.
func (b *imageBudget) take(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n
	if b.limit > 0 && b.used > b.limit {
		return errorf(ErrInvalid, "%w: more than %s bytes (the container's limits.memory plus %d MiB, or the host's migration image limit)",
			errImageBudget, strconv.FormatInt(b.limit, 10), migrationImageSlack>>20)
	}
	return nil
}

// reader returns r counted against b: a read past the limit fails.
func (b *imageBudget) reader(r io.Reader) io.Reader { return &budgetReader{r: r, b: b} }

type budgetReader struct {
	r   io.Reader
	b   *imageBudget
	err error // sticky: io.ReadFull drops an error that comes with a full buffer
}

func (br *budgetReader) Read(p []byte) (int, error) {
	if br.err != nil {
		return 0, br.err
	}
	n, err := br.r.Read(p)
	if n > 0 {
		if terr := br.b.take(int64(n)); terr != nil {
			br.err = terr
			return 0, terr
		}
	}
	return n, err
}

// checkHello validates what a peer's Hello asks for, before anything is
// reserved: the same checks as a container created through the API.
func checkHello(hello migration.Hello) error {
	if hello.Version != migration.Version {
		return errorf(ErrInvalid, "migration protocol version %d, this host speaks %d", hello.Version, migration.Version)
	}
	if err := ValidateName("instance", hello.Instance.Name); err != nil {
		return err
	}
	if err := validateConfig(hello.Instance.Config); err != nil {
		return fmt.Errorf("the container's configuration: %w", err)
	}
	if hello.Snapshots < 0 {
		return errorf(ErrInvalid, "%d snapshots", hello.Snapshots)
	}
	return nil
}

// abort ends the session for a reason found away from the control loop
// (a page stream over the budget, too many streams): the peer is told,
// the session closed, and migrateIn's error names the reason.
func (m *migrationTarget) abort(err error) {
	m.abortMu.Lock()
	first := m.abortErr == nil
	if first {
		m.abortErr = err
	}
	m.abortMu.Unlock()
	if first {
		m.d.log.Warn("incoming migration aborted", "name", m.name, "err", err)
		m.sess.SendError(err)
		go m.sess.Linger(migrationLinger)
	}
}

// aborted returns abort's reason, or nil.
func (m *migrationTarget) aborted() error {
	m.abortMu.Lock()
	defer m.abortMu.Unlock()
	return m.abortErr
}
