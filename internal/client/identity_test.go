package client

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/trust"
)

func TestLoadIdentity(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fingerprint(first) == "" || fingerprint(first) != fingerprint(again) {
		t.Errorf("the identity changed between loads: %s, %s", fingerprint(first), fingerprint(again))
	}
}

func fingerprint(c tls.Certificate) string { return trust.CertFingerprint(c) }

func TestDecodeToken(t *testing.T) {
	want := trust.Token{Name: "cli", Kind: api.TrustKindPeer, Addresses: []string{"10.0.0.1:8443"},
		Fingerprint: "f00d", Secret: "s3cret", Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	got, err := DecodeToken(want.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || got.Kind != want.Kind || len(got.Addresses) != 1 || got.Addresses[0] != want.Addresses[0] ||
		got.Fingerprint != want.Fingerprint || got.Secret != want.Secret || !got.Expires.Equal(want.Expires) {
		t.Errorf("DecodeToken = %+v, want %+v", got, want)
	}
	if _, err := DecodeToken("not a token"); !errors.Is(err, trust.ErrBadToken) {
		t.Errorf("DecodeToken(garbage) = %v, want trust.ErrBadToken", err)
	}
}
