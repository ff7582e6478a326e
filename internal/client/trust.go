package client

import (
	"context"

	"github.com/vesselhost/vessel/internal/api"
)

// IssueToken asks the server for a one-time join token.
func (c *Client) IssueToken(ctx context.Context, req api.TokenPost) (api.TokenResponse, error) {
	var out api.TokenResponse
	_, err := c.do(ctx, "POST", "/1.0/tokens", req, &out)
	return out, err
}

// TrustCertificate adds a PEM certificate to the server's trust store.
func (c *Client) TrustCertificate(ctx context.Context, req api.CertificatePost) error {
	_, err := c.do(ctx, "POST", "/1.0/certificates", req, nil)
	return err
}

// Certificates lists the server's trusted certificates.
func (c *Client) Certificates(ctx context.Context) ([]api.Certificate, error) {
	var out []api.Certificate
	_, err := c.do(ctx, "GET", "/1.0/certificates", nil, &out)
	return out, err
}

// RemoveCertificate stops the server trusting a certificate (fingerprint
// prefix or name).
func (c *Client) RemoveCertificate(ctx context.Context, ref string) error {
	_, err := c.do(ctx, "DELETE", "/1.0/certificates/"+esc(ref), nil, nil)
	return err
}

// AddPeer has the server join another host as a peer.
func (c *Client) AddPeer(ctx context.Context, req api.PeerPost) (api.Peer, error) {
	var out api.Peer
	_, err := c.do(ctx, "POST", "/1.0/peers", req, &out)
	return out, err
}

// Peers lists the server's peer hosts.
func (c *Client) Peers(ctx context.Context) ([]api.Peer, error) {
	var out []api.Peer
	_, err := c.do(ctx, "GET", "/1.0/peers", nil, &out)
	return out, err
}

// RemovePeer has the server forget a peer host.
func (c *Client) RemovePeer(ctx context.Context, name string) error {
	_, err := c.do(ctx, "DELETE", "/1.0/peers/"+esc(name), nil, nil)
	return err
}
