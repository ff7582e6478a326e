package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/trust"
)

// DefaultTokenTTL is how long a join token works.
const DefaultTokenTTL = 24 * time.Hour

// MaxTokenTTL bounds the lifetime a client may ask for a token.
const MaxTokenTTL = 365 * 24 * time.Hour

func (d *Daemon) loadIdentity() error {
	id, err := trust.LoadOrCreate(d.cfg.certPath(), d.cfg.keyPath(), d.cfg.Name)
	if err != nil {
		return err
	}
	d.identity = id
	d.fingerprint = trust.CertFingerprint(id)
	return nil
}

// TLSConfig returns the HTTPS listener's configuration.
func (d *Daemon) TLSConfig() *tls.Config { return trust.ServerTLS(d.identity) }

// Fingerprint returns this host's certificate fingerprint.
func (d *Daemon) Fingerprint() string { return d.fingerprint }

// Authenticate classifies a TLS peer certificate (nil: none presented).
func (d *Daemon) Authenticate(cert *x509.Certificate) (trust.Auth, string) {
	if cert == nil {
		return trust.AuthNone, ""
	}
	c, err := d.state.GetCertificate(trust.Fingerprint(cert.Raw))
	if err != nil {
		return trust.AuthNone, ""
	}
	if c.Kind == trust.KindPeer {
		return trust.AuthPeer, c.Name
	}
	return trust.AuthClient, c.Name
}

// IssueToken creates a one-time token that lets a client (or, with kind
// peer, another host) have its certificate trusted here.
func (d *Daemon) IssueToken(ctx context.Context, req api.TokenPost) (api.TokenResponse, error) {
	kind := req.Kind
	if kind == "" {
		kind = trust.KindClient
	}
	if kind != trust.KindClient && kind != trust.KindPeer {
		return api.TokenResponse{}, errorf(ErrInvalid, "unknown trust kind %q (want client or peer)", kind)
	}
	if err := ValidateName("trust", req.Name); err != nil {
		return api.TokenResponse{}, err
	}
	ttl, err := secondsDuration("token lifetime", req.TTLSeconds, MaxTokenTTL)
	if err != nil {
		return api.TokenResponse{}, err
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	addrs := d.advertised()
	if len(addrs) == 0 {
		return api.TokenResponse{}, errorf(ErrConflict, "this host has no HTTPS address: start vesseld with --listen")
	}
	tok := trust.Token{Name: req.Name, Kind: kind, Addresses: addrs, Fingerprint: d.fingerprint,
		Secret: trust.NewSecret(), Expires: time.Now().Add(ttl).UTC()}
	rec := state.Token{SecretHash: trust.SecretHash(tok.Secret), Name: tok.Name, Kind: kind, Expires: tok.Expires}
	if err := d.state.AddToken(rec); err != nil {
		return api.TokenResponse{}, err
	}
	return api.TokenResponse{Token: tok.Encode(), Expires: tok.Expires}, nil
}

// advertised returns the addresses written into tokens: --advertise, else
// the --listen addresses with unspecified hosts replaced by this host's
// addresses.
func (d *Daemon) advertised() []string {
	if len(d.cfg.Advertise) > 0 {
		return d.cfg.Advertise
	}
	var out []string
	for _, l := range d.cfg.Listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
			out = append(out, l)
			continue
		}
		ifaddrs, _ := net.InterfaceAddrs()
		for _, a := range ifaddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				out = append(out, net.JoinHostPort(n.IP.String(), port))
			}
		}
	}
	return out
}

// Join trusts the certificate presented on this TLS connection if the
// request carries a valid, unused token secret.
func (d *Daemon) Join(ctx context.Context, cert *x509.Certificate, secret string) error {
	if cert == nil {
		return errorf(ErrInvalid, "joining needs a client certificate")
	}
	tok, err := d.state.ConsumeToken(trust.SecretHash(secret), time.Now())
	if errors.Is(err, state.ErrNotFound) {
		return errorf(ErrForbidden, "%w", trust.ErrBadToken)
	} else if err != nil {
		return fmt.Errorf("check the join token: %w", err) // the store failed: not the caller's fault
	}
	fp := trust.Fingerprint(cert.Raw)
	d.log.Info("trusting certificate", "name", tok.Name, "kind", tok.Kind, "fingerprint", fp[:12])
	return d.state.PutCertificate(state.Certificate{Fingerprint: fp, Name: tok.Name, Kind: tok.Kind,
		PEM: pemOf(cert.Raw), Added: time.Now().UTC()})
}

// TrustCertificate trusts a certificate given by an administrator.
func (d *Daemon) TrustCertificate(ctx context.Context, req api.CertificatePost) error {
	der, err := trust.ParseCertPEM(req.Certificate)
	if err != nil {
		return errorf(ErrInvalid, "certificate: %w", err)
	}
	kind := req.Kind
	if kind == "" {
		kind = trust.KindClient
	}
	if kind != trust.KindClient && kind != trust.KindPeer {
		return errorf(ErrInvalid, "unknown trust kind %q (want client or peer)", kind)
	}
	if err := ValidateName("trust", req.Name); err != nil {
		return err
	}
	return d.state.PutCertificate(state.Certificate{Fingerprint: trust.Fingerprint(der), Name: req.Name, Kind: kind,
		PEM: req.Certificate, Added: time.Now().UTC()})
}

// ListTrust returns the trusted certificates.
func (d *Daemon) ListTrust(ctx context.Context) ([]api.Certificate, error) {
	certs, err := d.state.ListCertificates()
	if err != nil {
		return nil, err
	}
	out := make([]api.Certificate, 0, len(certs))
	for _, c := range certs {
		out = append(out, api.Certificate{Fingerprint: c.Fingerprint, Name: c.Name, Kind: c.Kind, Added: c.Added})
	}
	return out, nil
}

// RemoveTrust stops trusting certificates by fingerprint (prefix) or name.
func (d *Daemon) RemoveTrust(ctx context.Context, ref string) error {
	certs, err := d.state.ListCertificates()
	if err != nil {
		return err
	}
	n := 0
	for _, c := range certs {
		if c.Name == ref || (len(ref) >= 8 && strings.HasPrefix(c.Fingerprint, ref)) {
			if err := d.state.DeleteCertificate(c.Fingerprint); err != nil {
				return err
			}
			// A removed peer migrates nothing more in: its sessions end
			// (those not yet running their container here roll back).
			if k := d.incoming.revoke(c.Fingerprint); k > 0 {
				d.log.Warn("trust removed: incoming migrations ended", "peer", c.Name, "sessions", k)
			}
			n++
		}
	}
	if n == 0 {
		return errorf(ErrNotFound, "no trusted certificate %q", ref)
	}
	return nil
}

// AddPeer makes this host trusted by another one with a peer token the
// other host issued, and remembers it as a migration target.
func (d *Daemon) AddPeer(ctx context.Context, req api.PeerPost) (api.Peer, error) {
	if err := ValidateName("peer", req.Name); err != nil {
		return api.Peer{}, err
	}
	tok, err := trust.DecodeToken(req.Token)
	if err != nil {
		return api.Peer{}, errorf(ErrInvalid, "%w", err)
	}
	if tok.Kind != trust.KindPeer {
		return api.Peer{}, errorf(ErrInvalid, "that is a %s token; a peer needs one made with --peer", tok.Kind)
	}
	addrs := tok.Addresses
	if req.Address != "" {
		addrs = []string{req.Address}
	}
	var joinErr error
	for _, a := range addrs {
		c := client.NewHTTPS(a, tok.Fingerprint, d.identity)
		if joinErr = c.Join(ctx, tok.Secret); joinErr == nil {
			p := state.Peer{Name: req.Name, Addresses: []string{a}, Fingerprint: tok.Fingerprint, Added: time.Now().UTC()}
			if err := d.state.PutPeer(p); err != nil {
				return api.Peer{}, err
			}
			return renderPeer(p), nil
		}
	}
	return api.Peer{}, fmt.Errorf("join peer %s: %w", req.Name, joinErr)
}

// ListPeers returns the peer hosts.
func (d *Daemon) ListPeers(ctx context.Context) ([]api.Peer, error) {
	peers, err := d.state.ListPeers()
	if err != nil {
		return nil, err
	}
	out := make([]api.Peer, 0, len(peers))
	for _, p := range peers {
		out = append(out, renderPeer(p))
	}
	return out, nil
}

// RemovePeer forgets a peer host.
func (d *Daemon) RemovePeer(ctx context.Context, name string) error {
	if err := d.state.DeletePeer(name); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return errorf(ErrNotFound, "peer %q not found", name)
		}
		return err
	}
	return nil
}

// peerByFingerprint finds the peer presenting fp.
func (d *Daemon) peerByFingerprint(fp string) (state.Peer, error) {
	peers, err := d.state.ListPeers()
	if err != nil {
		return state.Peer{}, err
	}
	for _, p := range peers {
		if p.Fingerprint == fp {
			return p, nil
		}
	}
	return state.Peer{}, errorf(ErrNotFound, "this host (%s) has no peer with fingerprint %.12s: add one with 'vessel peer add'", d.cfg.Name, fp)
}

func renderPeer(p state.Peer) api.Peer {
	return api.Peer{Name: p.Name, Addresses: p.Addresses, Fingerprint: p.Fingerprint, Added: p.Added}
}

func pemOf(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
