package client

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/trust"
)

// Files of a user's client identity, in its configuration directory.
const (
	IdentityCertFile = "client.crt"
	IdentityKeyFile  = "client.key"
)

// LoadIdentity returns the user's client certificate stored in dir
// (IdentityCertFile, IdentityKeyFile), creating a self-signed one named
// after this host on first use. It is what an HTTPS remote pins the user
// by (NewHTTPS).
func LoadIdentity(dir string) (tls.Certificate, error) {
	host, _ := os.Hostname()
	return trust.LoadOrCreate(filepath.Join(dir, IdentityCertFile), filepath.Join(dir, IdentityKeyFile), "vessel-client@"+host)
}

// JoinToken is what a join token (from POST /1.0/tokens, 'vessel trust
// add') tells its holder: the issuing host's addresses and fingerprint, so
// it can be reached and recognised, and the secret that Join presents.
type JoinToken struct {
	// Name is the name the joiner will be trusted under.
	Name string
	// Kind is api.TrustKindClient or api.TrustKindPeer.
	Kind string
	// Addresses are the issuer's HTTPS addresses (host:port).
	Addresses []string
	// Fingerprint is the issuer's certificate fingerprint.
	Fingerprint string
	// Secret is the one-time secret.
	Secret string
	// Expires is when the token stops working.
	Expires time.Time
}

// DecodeToken parses a join token as the issuing host printed it.
func DecodeToken(s string) (JoinToken, error) {
	t, err := trust.DecodeToken(s)
	if err != nil {
		return JoinToken{}, err
	}
	return JoinToken{Name: t.Name, Kind: t.Kind, Addresses: t.Addresses, Fingerprint: t.Fingerprint,
		Secret: t.Secret, Expires: t.Expires}, nil
}
