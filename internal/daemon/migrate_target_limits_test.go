package daemon

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/vesselhost/vessel/internal/imgstream"
	"github.com/vesselhost/vessel/internal/migration"
)

// TestImageBudget: page files and images past the container's memory
// limit (plus slack) are refused, however they are read.
func TestImageBudget(t *testing.T) {
	d := &Daemon{cfg: Config{MigrationImageLimit: 1 << 30}}
	if got, want := d.imageLimit(map[string]string{KeyMemory: "8MiB"}), int64(8<<20+migrationImageSlack); got != want {
		t.Errorf("limit with limits.memory = %d, want %d", got, want)
	}
	if got := d.imageLimit(nil); got != 1<<30 {
		t.Errorf("limit without limits.memory = %d, want the host's", got)
	}
	b := &imageBudget{limit: 10 << 20}
	s := &imgstream.DirSink{Dir: t.TempDir(), Volatile: true}
	if err := s.Store(t.Context(), "pages-1.img", b.reader(bytes.NewReader(make([]byte, 6<<20)))); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	err := s.Store(t.Context(), "pages-2.img", b.reader(bytes.NewReader(make([]byte, 6<<20))))
	if !errors.Is(err, errImageBudget) || !errors.Is(err, ErrInvalid) {
		t.Errorf("past the budget: got %v", err)
	}
	// ReceiveDir too.
	b = &imageBudget{limit: 1 << 20}
	var tarball bytes.Buffer
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/big.img", make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := migration.SendDir(&tarball, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := migration.ReceiveDir(b.reader(&tarball), t.TempDir()); !errors.Is(err, errImageBudget) {
		t.Errorf("images past the budget: got %v", err)
	}
}

// TestCheckHello: a peer's hello is validated as the API validates a
// container.
func TestCheckHello(t *testing.T) {
	good := migration.Hello{Version: migration.Version, Instance: migration.Instance{Name: "c1", Config: map[string]string{KeyMemory: "1GiB"}}}
	if err := checkHello(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*migration.Hello){
		"version": func(h *migration.Hello) { h.Version++ },
		"name":    func(h *migration.Hello) { h.Instance.Name = "../etc" },
		"config":  func(h *migration.Hello) { h.Instance.Config = map[string]string{KeyMemory: "lots"} },
		"key":     func(h *migration.Hello) { h.Instance.Config = map[string]string{"raw.lxc": "x"} },
	} {
		h := good
		h.Instance.Config = map[string]string{}
		mod(&h)
		if err := checkHello(h); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// TestIncomingSessions: a peer's sessions are capped, and revoking the
// peer ends them all.
func TestIncomingSessions(t *testing.T) {
	var s incomingSessions
	a, b := &incoming{}, &incoming{}
	if err := s.add("fp", a, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.add("fp", b, 1); !errors.Is(err, ErrConflict) {
		t.Errorf("a second session past the cap: %v", err)
	}
	if err := s.add("other", b, 1); err != nil {
		t.Errorf("another peer's session: %v", err)
	}
	var cause error
	a.bind(func(err error) { cause = err })
	if n := s.revoke("fp"); n != 1 || !errors.Is(cause, errPeerRevoked) {
		t.Errorf("revoke: %d sessions ended, cause %v", n, cause)
	}
}
