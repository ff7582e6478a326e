// Package trust is how vessel hosts and clients recognise each other over
// HTTPS.
//
// Vocabulary:
//
//   - Identity: a self-signed certificate and its key. Every vesseld has one
//     (ROOT/server.crt, server.key) that it serves with and also presents
//     when it connects to another host; every CLI user has one
//     (~/.config/vessel/client.crt, client.key).
//   - Fingerprint: the lowercase hex SHA-256 of a certificate's DER bytes.
//     Peers are pinned by fingerprint, never by hostname or CA.
//   - Trusted certificate: a certificate a host lets in, of a Kind: a
//     "client" (full API access) or a "peer" (another host: migration
//     only).
//   - Auth: what a request to the API may do, decided by how it arrived:
//     over the root-only unix socket (local), or over TLS with a trusted
//     client's certificate, a trusted peer's, or none trusted.
//   - Token: a one-time, expiring secret a host issues so that a client or
//     peer can have its certificate trusted; the token also carries the
//     issuer's address and fingerprint, so the joiner can verify the host it
//     talks to.
package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/api"
)

// Auth is what a request to the API may do, decided by how it arrived.
// Its values are the API's (api.Server.Auth).
type Auth string

// Auth levels.
const (
	// AuthLocal came over the root-only unix socket: everything.
	AuthLocal Auth = api.AuthLocal
	// AuthClient presented a trusted client certificate: everything.
	AuthClient Auth = api.AuthClient
	// AuthPeer presented a trusted peer host's certificate: migration.
	AuthPeer Auth = api.AuthPeer
	// AuthNone is an unknown or missing certificate: public endpoints only.
	AuthNone Auth = api.AuthUntrusted
)

// Kinds of trusted certificates: the API's.
const (
	KindClient = api.TrustKindClient
	KindPeer   = api.TrustKindPeer
)

// Errors.
var (
	// ErrBadToken says a token is malformed, unknown, used or expired.
	ErrBadToken = errors.New("invalid or expired token")
	// ErrFingerprint says a host's certificate is not the pinned one.
	ErrFingerprint = errors.New("certificate fingerprint mismatch")
)

// Fingerprint returns a certificate's fingerprint.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// LoadOrCreate returns the identity stored as certFile/keyFile, creating a
// new ECDSA P-256 self-signed one (valid ten years) if they do not exist.
func LoadOrCreate(certFile, keyFile, commonName string) (tls.Certificate, error) {
	if _, err := os.Stat(certFile); errors.Is(err, os.ErrNotExist) {
		if err := create(certFile, keyFile, commonName); err != nil {
			return tls.Certificate{}, err
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load identity %s: %w", certFile, err)
	}
	return cert, nil
}

func create(certFile, keyFile, cn string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"vessel"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{cn},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// CertFingerprint returns the fingerprint of an identity's leaf.
func CertFingerprint(c tls.Certificate) string {
	if len(c.Certificate) == 0 {
		return ""
	}
	return Fingerprint(c.Certificate[0])
}

// CertPEM returns an identity's leaf certificate as PEM.
func CertPEM(c tls.Certificate) string {
	if len(c.Certificate) == 0 {
		return ""
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
}

// ParseCertPEM returns the DER bytes of a PEM certificate.
func ParseCertPEM(s string) ([]byte, error) {
	b, _ := pem.Decode([]byte(s))
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	if _, err := x509.ParseCertificate(b.Bytes); err != nil {
		return nil, err
	}
	return b.Bytes, nil
}

// PinnedTLS returns a client TLS configuration that presents id and
// accepts only a server whose certificate has the given fingerprint.
func PinnedTLS(id tls.Certificate, fingerprint string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{id},
		MinVersion:   tls.VersionTLS13,
		// Self-signed peers are verified by their pinned fingerprint
		// below instead of by a CA chain and hostname.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return fmt.Errorf("%w: no certificate", ErrFingerprint)
			}
			got := Fingerprint(raw[0])
			if subtle.ConstantTimeCompare([]byte(got), []byte(fingerprint)) != 1 {
				return fmt.Errorf("%w: got %s, want %s", ErrFingerprint, short(got), short(fingerprint))
			}
			return nil
		},
	}
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// ServerTLS returns the server side: it serves id and asks for (but does not
// require) a client certificate; the API decides per route what an
// unknown or missing certificate may do.
func ServerTLS(id tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{id},
		MinVersion:   tls.VersionTLS13,
		ClientAuth:   tls.RequestClientCert,
	}
}

// Token is what a host hands out for one join.
type Token struct {
	// Name is the name the joiner will be trusted under.
	Name string `json:"name"`
	// Kind is KindClient or KindPeer.
	Kind string `json:"kind"`
	// Addresses are the issuer's HTTPS addresses (host:port).
	Addresses []string `json:"addresses"`
	// Fingerprint is the issuer's certificate fingerprint.
	Fingerprint string `json:"fingerprint"`
	// Secret is the one-time secret.
	Secret string `json:"secret"`
	// Expires is when the token stops working.
	Expires time.Time `json:"expires"`
}

// NewSecret returns a random 32-byte secret, hex encoded.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SecretHash is how a host stores a token's secret.
func SecretHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Encode returns the token as one copy-pasteable string.
func (t Token) Encode() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeToken parses a string made by Encode.
func DecodeToken(s string) (Token, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Token{}, fmt.Errorf("%w: not a vessel token", ErrBadToken)
	}
	var t Token
	if err := json.Unmarshal(b, &t); err != nil || t.Secret == "" || t.Fingerprint == "" {
		return Token{}, fmt.Errorf("%w: not a vessel token", ErrBadToken)
	}
	return t, nil
}
