package state

import (
	"errors"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vessel.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestInstanceCRUD(t *testing.T) {
	s, path := openTemp(t)
	inst := Instance{Name: "web1", Image: "abc", Address: netip.MustParseAddr("10.0.0.2"), Init: []string{"/sbin/init"}}
	if err := s.CreateInstance(inst); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateInstance(inst); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v, want ErrExists", err)
	}
	got, err := s.UpdateInstance("web1", func(i *Instance) error { i.State = StateRunning; return nil })
	if err != nil || !got.Running() || got.Version != InstanceVersion {
		t.Fatalf("update: %+v %v", got, err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateInstance("web1", func(i *Instance) error { i.State = StateStopped; return boom }); !errors.Is(err, boom) {
		t.Fatalf("aborted update: %v", err)
	}
	if _, err := s.UpdateInstance("nope", func(*Instance) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}

	// Survives reopening.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err = s2.GetInstance("web1")
	if err != nil || !got.Running() || got.Address != inst.Address {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	used, _ := s2.UsedAddresses()
	if len(used) != 1 || used[0] != inst.Address {
		t.Fatalf("UsedAddresses = %v", used)
	}
	if err := s2.DeleteInstance("web1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.GetInstance("web1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestConcurrentCreatesAreUnique(t *testing.T) {
	s, _ := openTemp(t)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.CreateInstance(Instance{Name: "same"})
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, ErrExists) {
			t.Fatal(err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates succeeded, want 1", ok)
	}
}

func TestImagesAndAliases(t *testing.T) {
	s, _ := openTemp(t)
	a := Image{Fingerprint: "aaaaaaaa11", Aliases: []string{"busybox"}}
	b := Image{Fingerprint: "aaaaaaaa22", Aliases: []string{"other"}}
	for _, img := range []Image{a, b} {
		if err := s.PutImage(img); err != nil {
			t.Fatal(err)
		}
	}
	if img, err := s.ResolveImage("busybox"); err != nil || img.Fingerprint != a.Fingerprint {
		t.Fatalf("resolve alias: %+v %v", img, err)
	}
	if img, err := s.ResolveImage("aaaaaaaa2"); err != nil || img.Fingerprint != b.Fingerprint {
		t.Fatalf("resolve prefix: %+v %v", img, err)
	}
	if _, err := s.ResolveImage("aaaaaaaa"); err == nil {
		t.Fatal("ambiguous prefix resolved")
	}
	if _, err := s.ResolveImage("missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// Moving an alias takes it from the old image.
	b.Aliases = []string{"other", "busybox"}
	if err := s.PutImage(b); err != nil {
		t.Fatal(err)
	}
	old, _ := s.GetImage(a.Fingerprint)
	if len(old.Aliases) != 0 {
		t.Fatalf("old image kept aliases %v", old.Aliases)
	}
	if err := s.DeleteImage(b.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveImage("busybox"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("alias survived delete: %v", err)
	}
}

func TestTrustRecords(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutCertificate(Certificate{Fingerprint: "ff", Name: "me", Kind: "client"}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.GetCertificate("ff"); err != nil || c.Name != "me" || c.Version != TrustVersion {
		t.Fatalf("%+v %v", c, err)
	}
	now := time.Now()
	if err := s.AddToken(Token{SecretHash: "h1", Name: "n", Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddToken(Token{SecretHash: "h2", Name: "old", Expires: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.ConsumeToken("h1", now); err != nil || tok.Name != "n" {
		t.Fatalf("consume: %+v %v", tok, err)
	}
	if _, err := s.ConsumeToken("h1", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("token used twice: %v", err)
	}
	if _, err := s.ConsumeToken("h2", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired token accepted: %v", err)
	}
	if left, _ := s.ListTokens(); len(left) != 0 {
		t.Fatalf("tokens left: %v", left)
	}
	if err := s.PutPeer(Peer{Name: "beta", Addresses: []string{"a:1"}, Fingerprint: "ee"}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.GetPeer("beta"); err != nil || p.Fingerprint != "ee" {
		t.Fatalf("%+v %v", p, err)
	}
}
