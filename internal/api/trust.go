package api

import "time"

// Kinds of trusted certificates (TokenPost.Kind, CertificatePost.Kind,
// Certificate.Kind).
const (
	// TrustKindClient is a client: full API access.
	TrustKindClient = "client"
	// TrustKindPeer is another vessel host: migration only.
	TrustKindPeer = "peer"
)

// TokenPost is POST /1.0/tokens: issue a one-time join token.
type TokenPost struct {
	// Name is what the joiner will be trusted as.
	Name string `json:"name"`
	// Kind is TrustKindClient (default) or TrustKindPeer (another host).
	Kind string `json:"kind,omitempty"`
	// TTLSeconds is the token's lifetime (0: the default, 24 h; at most
	// 365 days, more is refused with 400).
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}

// TokenResponse carries an issued token.
type TokenResponse struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// CertificatePost is POST /1.0/certificates: either join with a token
// secret (the certificate is the one presented on the TLS connection), or,
// for a trusted caller, add a certificate given as PEM.
type CertificatePost struct {
	Secret      string `json:"secret,omitempty"`
	Certificate string `json:"certificate,omitempty"`
	Name        string `json:"name,omitempty"`
	Kind        string `json:"kind,omitempty"`
}

// Certificate is a trusted certificate.
type Certificate struct {
	Fingerprint string    `json:"fingerprint"`
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	Added       time.Time `json:"added"`
}

// PeerPost is POST /1.0/peers: join another host as a peer with a peer
// token it issued.
type PeerPost struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	// Address overrides the token's addresses (host:port).
	Address string `json:"address,omitempty"`
}

// Peer is another host this one can migrate containers to.
type Peer struct {
	Name        string    `json:"name"`
	Addresses   []string  `json:"addresses"`
	Fingerprint string    `json:"fingerprint"`
	Added       time.Time `json:"added"`
}
