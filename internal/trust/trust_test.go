package trust

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestIdentityAndPinning(t *testing.T) {
	dir := t.TempDir()
	srv, err := LoadOrCreate(filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key"), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreate(filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key"), "alpha")
	if err != nil || CertFingerprint(again) != CertFingerprint(srv) {
		t.Fatalf("reload gave another identity: %v", err)
	}
	cli, err := LoadOrCreate(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), "me")
	if err != nil {
		t.Fatal(err)
	}
	if der, err := ParseCertPEM(CertPEM(cli)); err != nil || Fingerprint(der) != CertFingerprint(cli) {
		t.Fatalf("PEM round trip: %v", err)
	}

	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerTLS(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err == nil && len(tc.ConnectionState().PeerCertificates) > 0 {
				seen <- Fingerprint(tc.ConnectionState().PeerCertificates[0].Raw)
			}
			c.Close()
		}
	}()
	dial := func(fp string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), PinnedTLS(cli, fp))
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := dial(CertFingerprint(srv)); err != nil {
		t.Fatalf("pinned dial: %v", err)
	}
	if got := <-seen; got != CertFingerprint(cli) {
		t.Fatalf("server saw client %s", got)
	}
	if err := dial(CertFingerprint(cli)); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("wrong pin accepted: %v", err)
	}
}

func TestToken(t *testing.T) {
	tok := Token{Name: "beta", Kind: KindPeer, Addresses: []string{"10.0.0.1:8443"}, Fingerprint: "ab", Secret: NewSecret(), Expires: time.Now()}
	got, err := DecodeToken(tok.Encode())
	if err != nil || got.Secret != tok.Secret || got.Addresses[0] != "10.0.0.1:8443" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "!!!", "e30"} {
		if _, err := DecodeToken(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("DecodeToken(%q) = %v", bad, err)
		}
	}
	if SecretHash("a") == SecretHash("b") || len(NewSecret()) != 64 {
		t.Fatal("secrets")
	}
}
