package server

import (
	"context"
	"crypto/x509"
	"net/http"

	"github.com/vesselhost/vessel/internal/daemon"
)

type authKey struct{}

// authOf returns how the request was authenticated (see authenticate).
func authOf(r *http.Request) daemon.Auth {
	if a, ok := r.Context().Value(authKey{}).(daemon.Auth); ok {
		return a
	}
	return daemon.AuthNone
}

// peerCert returns the certificate the client presented, or nil.
func peerCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	return r.TLS.PeerCertificates[0]
}

// authenticate decides what a request may do: over the root-only unix
// socket everything; over TLS what its certificate is trusted for.
func (s *Server) authenticate(r *http.Request) *http.Request {
	a := daemon.AuthLocal
	if r.TLS != nil {
		a, _ = s.core.Authenticate(peerCert(r))
	}
	return r.WithContext(context.WithValue(r.Context(), authKey{}, a))
}

// allowed reports whether auth may call a route of that access level.
func allowed(a daemon.Auth, level access) bool {
	if level == accessPeerOnly {
		return a == daemon.AuthPeer
	}
	switch a {
	case daemon.AuthLocal, daemon.AuthClient:
		return true
	case daemon.AuthPeer:
		return level == accessPeer || level == accessPublic
	}
	return level == accessPublic
}
