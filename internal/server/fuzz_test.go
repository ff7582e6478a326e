package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/trust"
)

// FuzzAPIBodies: the JSON body of every control route, from a trusted
// client, through routing and decoding. A body the server cannot decode is
// a 400 (or 413 when too long) error reply; nothing panics.
func FuzzAPIBodies(f *testing.F) {
	routes := []string{
		"POST /1.0/instances", "PATCH /1.0/instances/x", "PUT /1.0/instances/x/state",
		"POST /1.0/instances/x/snapshots", "POST /1.0/instances/x/snapshots/s/restore",
		"POST /1.0/instances/x/migrate", "POST /1.0/images/build", "POST /1.0/tokens",
		"POST /1.0/certificates", "POST /1.0/peers",
	}
	for i, body := range []string{
		`{"name":"web1","source":{"type":"image","image":"busybox"},"config":{"limits.memory":"1GiB"}}`,
		`{"config":{"limits.cpu":"2"}}`, `{"action":"stop","timeout":9223372036854775807,"force":true}`,
		`{"name":"s1","stateful":true}`, `{"stateful":true}`, `{"target_fingerprint":"ab","live":true}`,
		`{"distro":"debian"}`, `{"name":"me","kind":"peer","ttl_seconds":-1}`,
		`{"secret":"x"}`, `{"name":"b","token":"zz"}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Add(uint8(0), []byte(`{"name":`))
	f.Add(uint8(2), []byte(`{"unknown":1}`))
	s := New(bodyCore{&authCore{}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.authFor = func(*http.Request) trust.Auth { return trust.AuthClient }
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := routes[int(route)%len(routes)]
		method, path, _ := bytes.Cut([]byte(rt), []byte(" "))
		w := httptest.NewRecorder()
		r := httptest.NewRequest(string(method), string(path), bytes.NewReader(body))
		s.ServeHTTP(w, r)
		if w.Code == 0 {
			t.Fatal("no reply")
		}
	})
}

// bodyCore answers every action a control route's body reaches with an
// error, as a daemon refusing the request would.
type bodyCore struct{ *authCore }

var errFuzz = api.Errorf(api.ErrInvalid, "refused")

func (bodyCore) UpdateInstance(context.Context, string, api.InstancePatch) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) ChangeState(context.Context, string, api.InstanceStatePut) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) CreateSnapshot(context.Context, string, api.SnapshotsPost) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) RestoreSnapshot(context.Context, string, string, api.SnapshotRestorePost) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) MigrateInstance(context.Context, string, api.InstanceMigratePost) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) BuildImage(context.Context, api.ImageBuildPost) (*operations.Operation, error) {
	return nil, errFuzz
}

func (bodyCore) IssueToken(context.Context, api.TokenPost) (api.TokenResponse, error) {
	return api.TokenResponse{}, errFuzz
}

func (bodyCore) Join(context.Context, *x509.Certificate, string) error { return errFuzz }

func (bodyCore) AddPeer(context.Context, api.PeerPost) (api.Peer, error) { return api.Peer{}, errFuzz }
