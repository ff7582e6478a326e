package server

import (
	"context"
	"crypto/x509"
	"net/http"

	"github.com/vesselhost/vessel/internal/trust"
)

type authKey struct{}

// authOf returns how the request was authenticated (see authenticate).
func authOf(r *http.Request) trust.Auth {
	if a, ok := r.Context().Value(authKey{}).(trust.Auth); ok {
		return a
	}
	return trust.AuthNone
}

// peerCert returns the certificate the client presented, or nil.
func peerCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	return r.TLS.PeerCertificates[0]
}

// authenticate records in the request's context what it may do, as
// s.authFor decides (authByConnection; tests put a fixed level there).
func (s *Server) authenticate(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), authKey{}, s.authFor(r)))
}

// authByConnection decides what a request may do: over the root-only unix
// socket everything; over TLS what its certificate is trusted for.
func (s *Server) authByConnection(r *http.Request) trust.Auth {
	if r.TLS == nil {
		return trust.AuthLocal
	}
	a, _ := s.core.Authenticate(peerCert(r))
	return a
}

// allowed reports whether auth may call a route of that access level.
func allowed(a trust.Auth, level access) bool {
	if level == accessPeerOnly {
		return a == trust.AuthPeer
	}
	switch a {
	case trust.AuthLocal, trust.AuthClient:
		return true
	case trust.AuthPeer:
		return level == accessPeer || level == accessPublic
	}
	return level == accessPublic
}
