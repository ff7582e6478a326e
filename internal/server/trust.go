package server

import (
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/trust"
)

func (s *Server) issueToken(r *http.Request) response {
	var req api.TokenPost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	tok, err := s.core.IssueToken(r.Context(), req)
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{status: http.StatusCreated, metadata: tok}
}

// addCertificate joins with a token (anyone holding one) or, for a trusted
// caller, adds a PEM certificate.
func (s *Server) addCertificate(r *http.Request) response {
	var req api.CertificatePost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	var err error
	switch {
	case req.Secret != "":
		err = s.core.Join(r.Context(), peerCert(r), req.Secret)
	case authOf(r) == trust.AuthLocal || authOf(r) == trust.AuthClient:
		err = s.core.TrustCertificate(r.Context(), req)
	default:
		err = errForbidden
	}
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{status: http.StatusCreated, metadata: struct{}{}}
}

func (s *Server) listCertificates(r *http.Request) response {
	certs, err := s.core.ListTrust(r.Context())
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: certs}
}

func (s *Server) removeCertificate(r *http.Request) response {
	if err := s.core.RemoveTrust(r.Context(), r.PathValue("ref")); err != nil {
		return errorResponse{err}
	}
	return nil
}

func (s *Server) listPeers(r *http.Request) response {
	peers, err := s.core.ListPeers(r.Context())
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: peers}
}

func (s *Server) addPeer(r *http.Request) response {
	var req api.PeerPost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	p, err := s.core.AddPeer(r.Context(), req)
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{status: http.StatusCreated, metadata: p}
}

func (s *Server) removePeer(r *http.Request) response {
	if err := s.core.RemovePeer(r.Context(), r.PathValue("name")); err != nil {
		return errorResponse{err}
	}
	return nil
}
