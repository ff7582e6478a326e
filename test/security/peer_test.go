package security

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/testhost"
	"github.com/vesselhost/vessel/internal/testutil"
	"github.com/vesselhost/vessel/internal/trust"
)

// A trusted migration peer may only migrate containers in. These tests play
// a hostile peer: a certificate the target trusts as a peer (joined with a
// real peer token), the real client side of the migration protocol
// (internal/migration), and hostile content on it.

// patience bounds how long a test waits for the target to act (never an
// assertion on timing: a test fails only if nothing happens at all).
const patience = 2 * time.Minute

// fakePeer is a hostile peer host trusted by target.
type fakePeer struct {
	t      *testing.T
	target *testhost.Host
	api    *client.Client
	name   string
}

// newTarget starts a host serving HTTPS (peers connect there) with extra
// vesseld flags.
func newTarget(t *testing.T, extra ...string) *testhost.Host {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return newHost(t, append([]string{"--listen", addr}, extra...)...).Host
}

// newFakePeer makes a certificate of its own and has target trust it as
// the peer "evil", with a peer token, as `vessel peer add` would.
func newFakePeer(t *testing.T, target *testhost.Host) *fakePeer {
	dir := t.TempDir()
	id, err := trust.LoadOrCreate(filepath.Join(dir, "evil.crt"), filepath.Join(dir, "evil.key"), "evil")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := client.DecodeToken(strings.TrimSpace(target.OK("trust", "add", "evil", "--peer")))
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewHTTPS(tok.Addresses[0], tok.Fingerprint, id)
	if err := c.Join(t.Context(), tok.Secret); err != nil {
		t.Fatalf("join as a peer: %v", err)
	}
	return &fakePeer{t: t, target: target, api: c, name: "evil"}
}

// session opens a migration session and sends hello.
func (p *fakePeer) session(ctx context.Context, hello migration.Hello) *migration.Session {
	p.t.Helper()
	conn, err := p.api.Upgrade(ctx, "/1.0/migration", migration.UpgradeProtocol)
	if err != nil {
		p.t.Fatal(err)
	}
	sess, err := migration.Client(conn)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { sess.Close() })
	if err := sess.Send(hello); err != nil {
		p.t.Fatal(err)
	}
	return sess
}

// hello is a cold move of a container named name (its volumes sent as
// btrfs send streams).
func hello(name string, cfg map[string]string) migration.Hello {
	return migration.Hello{Version: migration.Version, Source: "evil", TransferFormat: "btrfs-send/1",
		Instance: migration.Instance{Name: name, Image: "busybox", Created: time.Now(), Config: cfg,
			Init: []string{"/sbin/init"}, StopSignal: "SIGTERM"}}
}

// accepted opens a session whose hello the target accepts.
func (p *fakePeer) accepted(ctx context.Context, h migration.Hello) *migration.Session {
	p.t.Helper()
	sess := p.session(ctx, h)
	if _, err := sess.Expect(ctx, migration.MsgAccepted); err != nil {
		p.t.Fatalf("hello refused: %v", err)
	}
	return sess
}

// untilEnd reads control messages until the target ends the session,
// and returns the last error it reported (or the connection's end).
func untilEnd(ctx context.Context, sess *migration.Session) error {
	for {
		var m migration.Message
		if err := sess.Recv(ctx, &m); err != nil {
			return err
		}
		if err := migration.Expect(m, "none"); errors.Is(err, migration.ErrRemote) {
			return err
		}
	}
}

// checkNothingLeft checks that the target keeps nothing of name: no
// record (so no name and no address held), no volume, no images.
func checkNothingLeft(t *testing.T, h *testhost.Host, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	// The operation finishes its rollback after the session ends: wait for it.
	for {
		if _, err := h.Client().Instance(ctx, name); client.StatusCode(err) == 404 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is still on the target: %s", name, h.OK("list"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, p := range []string{
		filepath.Join(h.PoolPath(), "containers", name),
		filepath.Join(h.PoolPath(), "snapshots", name),
		filepath.Join(h.RunDir(), "migrate", name),
	} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the target kept %s (%v)", p, err)
		}
	}
}

// failedOp returns the error of the target's failed operation whose
// description mentions the peer, waiting for it.
func failedOp(t *testing.T, h *testhost.Host) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	for {
		ops, err := h.Client().Operations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if strings.Contains(op.Description, "evil") && op.Status == api.OperationFailure {
				return op.Err
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no failed operation for the peer's session: %+v", ops)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestPeerSendStreamEscapes: a peer's disk stream that writes through a
// symlink to an absolute host path, through ".." or clones a file from
// above its subvolume, writes nothing outside its own subvolume.
func TestPeerSendStreamEscapes(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	canary := t.TempDir()
	uuid := bytes.Repeat([]byte{0x5a}, 16)
	for what, stream := range map[string][]byte{
		// Without the jail this one wrote canary/pwned as root (the
		// other symlink stream failed there only because its rename
		// crossed filesystems).
		"symlink create": testutil.NewSendStream(".migrate-0").Symlink("escape", canary).
			CreateAt("escape/pwned", []byte("root was here")).Bytes(),
		"symlink": testutil.NewSendStream(".migrate-0").Symlink("escape", canary).
			File("escape/pwned", []byte("root was here")).Bytes(),
		"dotdot": testutil.NewSendStream(".migrate-0").File("../../../../../../.."+canary+"/pwned", []byte("x")).Bytes(),
		"clone": testutil.NewSendStream(".migrate-0").File("f", nil).
			Clone("f", uuid, "../../../../../../../etc/shadow", 4096).Bytes(),
	} {
		t.Run(what, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), patience)
			defer cancel()
			name := "evil-" + strings.ReplaceAll(what, " ", "-")
			sess := p.accepted(ctx, hello(name, nil))
			if err := sess.Send(migration.Message{Type: migration.MsgDisk, Iteration: 1, Final: true}); err != nil {
				t.Fatal(err)
			}
			st, err := sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = st.Write(stream)
			st.Close()
			err = untilEnd(ctx, sess)
			t.Logf("the target answered: %v", err)
			if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "receive disk") {
				t.Errorf("got %v, want the target's refusal of the disk", err)
			}
			if entries, _ := os.ReadDir(canary); len(entries) > 0 {
				t.Fatalf("the peer wrote %s on the target host", filepath.Join(canary, entries[0].Name()))
			}
			checkNothingLeft(t, h, name)
		})
	}
}

// TestPeerInvalidHello: a hello whose container configuration the API
// would refuse is refused with the API's reason, and nothing is reserved.
func TestPeerInvalidHello(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	for _, cfg := range []map[string]string{
		{"limits.memory": "all of it"},
		{"raw.lxc": "lxc.apparmor.profile=unconfined"},
		{"limits.processes": "-1"},
	} {
		sess := p.session(ctx, hello("evil1", cfg))
		_, err := sess.Expect(ctx, migration.MsgAccepted)
		t.Logf("%v: %v", cfg, err)
		if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "configuration") {
			t.Errorf("%v: got %v, want the target's refusal of the configuration", cfg, err)
		}
	}
	if out := h.OK("list", "-f", "csv"); strings.Contains(out, "evil1") {
		t.Errorf("an invalid hello reserved the name: %s", out)
	}
	checkNothingLeft(t, h, "evil1")
}

// TestPeerStalledSession: a peer that sends its hello and nothing more
// loses the name and address it reserved when the session's deadline
// passes; so does one whose certificate is removed meanwhile. Both end
// with a clear error on the target.
func TestPeerStalledSession(t *testing.T) {
	h := newTarget(t, "--migration-timeout", "3s", "--migration-sessions", "2")
	p := newFakePeer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()

	sess := p.accepted(ctx, hello("evil1", nil))
	if _, err := h.Client().Instance(ctx, "evil1"); err != nil {
		t.Fatalf("the accepted session reserved nothing: %v", err)
	}
	err := untilEnd(ctx, sess)
	t.Logf("the stalled session ended: %v", err)
	if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "ran out of time") {
		t.Errorf("the stalled peer heard %v, want the deadline", err)
	}
	if msg := failedOp(t, h); !strings.Contains(msg, "ran out of time") {
		t.Errorf("the target's operation failed with %q, want the deadline", msg)
	}
	checkNothingLeft(t, h, "evil1")

	// At most 2 sessions at once for one peer.
	a := p.accepted(ctx, hello("evil2", nil))
	b := p.accepted(ctx, hello("evil3", nil))
	c := p.session(ctx, hello("evil4", nil))
	_, err = c.Expect(ctx, migration.MsgAccepted)
	t.Logf("a third session: %v", err)
	if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "at most 2") {
		t.Errorf("a third session: got %v, want refused", err)
	}
	a.Close()
	b.Close()
	for _, n := range []string{"evil2", "evil3", "evil4"} {
		checkNothingLeft(t, h, n)
	}
}

// TestPeerRevoked: removing a peer's certificate ends its session at once;
// the half-received container is rolled back.
func TestPeerRevoked(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	sess := p.accepted(ctx, hello("evil1", nil))
	h.OK("trust", "remove", "evil")
	err := untilEnd(ctx, sess)
	t.Logf("the revoked session ended: %v", err)
	if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "removed from this host's trust store") {
		t.Errorf("the revoked peer heard %v, want the revocation", err)
	}
	if msg := failedOp(t, h); !strings.Contains(msg, "removed from this host's trust store") {
		t.Errorf("the target's operation failed with %q, want the revocation", msg)
	}
	checkNothingLeft(t, h, "evil1")
	// And the peer cannot come back.
	if _, err := p.api.Upgrade(ctx, "/1.0/migration", migration.UpgradeProtocol); err == nil {
		t.Error("a removed peer opened a new session")
	}
}

// TestPeerOversizedPages: page files beyond the container's memory limit
// (plus room for the other images) are not stored: the session ends with
// the reason, and the target's tmpfs keeps nothing.
func TestPeerOversizedPages(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	sess := p.accepted(ctx, hello("evil1", map[string]string{"limits.memory": "8MiB"}))
	st, err := sess.OpenStream(migration.StreamHeader{Kind: migration.StreamPage, Name: "pages-1.img"})
	if err != nil {
		t.Fatal(err)
	}
	// 8 MiB + 64 MiB is the budget: send 200 MiB, unless cut first.
	chunk := make([]byte, 1<<20)
	var sent int
	for ; sent < 200; sent++ {
		if _, err := st.Write(chunk); err != nil {
			break
		}
	}
	st.Close()
	err = untilEnd(ctx, sess)
	t.Logf("sent %d MiB; the session ended: %v", sent, err)
	if msg := failedOp(t, h); !strings.Contains(msg, "too big") {
		t.Errorf("the target's operation failed with %q, want the image budget", msg)
	}
	checkNothingLeft(t, h, "evil1")
	if du := dirSize(filepath.Join(h.RunDir(), "migrate")); du > 0 {
		t.Errorf("the target's run directory still holds %d bytes of migration files", du)
	}
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
