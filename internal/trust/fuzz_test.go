package trust

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/api"
)

// FuzzCertificateBody: POST /1.0/certificates, the one body anyone who
// reaches the HTTPS address may send (a join), and the PEM it may carry.
// A certificate that parses has the fingerprint of its DER bytes.
func FuzzCertificateBody(f *testing.F) {
	dir := f.TempDir()
	id, err := LoadOrCreate(dir+"/c.crt", dir+"/c.key", "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	good, _ := json.Marshal(api.CertificatePost{Certificate: CertPEM(id), Name: "web", Kind: KindPeer})
	f.Add(good)
	f.Add([]byte(`{"secret":"abc"}`))
	f.Add([]byte(`{"certificate":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.CertificatePost
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_ = SecretHash(req.Secret)
		der, err := ParseCertPEM(req.Certificate)
		if err == nil && len(Fingerprint(der)) != 64 {
			t.Fatalf("fingerprint %q", Fingerprint(der))
		}
	})
}

// FuzzDecodeToken: a join token, pasted by a user or a peer host's admin.
func FuzzDecodeToken(f *testing.F) {
	tok := Token{Name: "b", Kind: KindPeer, Addresses: []string{"10.0.0.2:8443"}, Fingerprint: "f00d", Secret: NewSecret(),
		Expires: time.Now().Add(time.Hour)}
	f.Add(tok.Encode())
	f.Add("")
	f.Add("e30")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := DecodeToken(s)
		if err == nil && (got.Secret == "" || got.Fingerprint == "") {
			t.Fatalf("decoded a token without secret or fingerprint: %+v", got)
		}
	})
}
