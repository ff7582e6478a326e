package state

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TrustVersion is the format version of certificate, token and peer records.
const TrustVersion = 1

// Certificate is a certificate this host trusts.
type Certificate struct {
	Version     int       `json:"version"`
	Fingerprint string    `json:"fingerprint"`
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	PEM         string    `json:"pem"`
	Added       time.Time `json:"added"`
}

// Token is a pending one-time join token (only its secret's hash is kept).
type Token struct {
	Version    int       `json:"version"`
	SecretHash string    `json:"secret_hash"`
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	Expires    time.Time `json:"expires"`
}

// Peer is another host this one can migrate to: where it is and the
// fingerprint it must present.
type Peer struct {
	Version     int       `json:"version"`
	Name        string    `json:"name"`
	Addresses   []string  `json:"addresses"`
	Fingerprint string    `json:"fingerprint"`
	Added       time.Time `json:"added"`
}

// PutCertificate trusts a certificate (replacing one with the same
// fingerprint).
func (s *Store) PutCertificate(c Certificate) error {
	c.Version = TrustVersion
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketCerts, c.Fingerprint, &c, false) })
}

// GetCertificate returns a trusted certificate by fingerprint.
func (s *Store) GetCertificate(fp string) (Certificate, error) {
	return get[Certificate](s, bucketCerts, fp)
}

// ListCertificates returns every trusted certificate, by fingerprint.
func (s *Store) ListCertificates() ([]Certificate, error) {
	recs, err := list[Certificate](s, bucketCerts)
	return sortedBy(recs, func(c Certificate) string { return c.Fingerprint }), err
}

// DeleteCertificate stops trusting a certificate.
func (s *Store) DeleteCertificate(fp string) error { return del(s, bucketCerts, fp) }

// AddToken stores a pending token.
func (s *Store) AddToken(t Token) error {
	t.Version = TrustVersion
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketTokens, t.SecretHash, &t, true) })
}

// ConsumeToken removes and returns the pending token with that secret hash;
// an unknown or expired token is ErrNotFound (expired ones are dropped).
func (s *Store) ConsumeToken(secretHash string, now time.Time) (Token, error) {
	var t Token
	expired := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTokens)
		v := b.Get([]byte(secretHash))
		if v == nil {
			return fmt.Errorf("token: %w", ErrNotFound)
		}
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		if err := b.Delete([]byte(secretHash)); err != nil {
			return err
		}
		// An expired token is dropped too: report it after the commit.
		expired = now.After(t.Expires)
		return nil
	})
	if err == nil && expired {
		err = fmt.Errorf("token expired: %w", ErrNotFound)
	}
	return t, err
}

// ListTokens returns the pending tokens.
func (s *Store) ListTokens() ([]Token, error) {
	recs, err := list[Token](s, bucketTokens)
	return sortedBy(recs, func(t Token) string { return t.Name }), err
}

// PutPeer stores (or replaces) a peer host.
func (s *Store) PutPeer(p Peer) error {
	p.Version = TrustVersion
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketPeers, p.Name, &p, false) })
}

// GetPeer returns a peer by name.
func (s *Store) GetPeer(name string) (Peer, error) { return get[Peer](s, bucketPeers, name) }

// ListPeers returns every peer, by name.
func (s *Store) ListPeers() ([]Peer, error) {
	recs, err := list[Peer](s, bucketPeers)
	return sortedBy(recs, func(p Peer) string { return p.Name }), err
}

// DeletePeer forgets a peer.
func (s *Store) DeletePeer(name string) error { return del(s, bucketPeers, name) }
