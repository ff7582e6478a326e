package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/trust"
)

// routePolicy is who may call each route, decided route by route: a new
// route fails TestRouteAccess until it is added here. Letters: l the local
// socket, c a trusted client, p a trusted peer host, u anyone else.
//
// Peers call only what migrations need: GET /1.0 (the fingerprint), GET
// /1.0/instances/{name} (does a moved instance run here?) and the
// migration session itself, which is for peers only. POST
// /1.0/certificates is public so that a token's holder can join; a peer
// joins with a peer token through it too, also when its certificate is
// already trusted (re-adding a peer, e.g. at a new address), and without a
// token the handler lets only the socket and clients add certificates.
var routePolicy = map[string]string{
	"GET /1.0":                                            "lcpu",
	"GET /1.0/instances":                                  "lc",
	"POST /1.0/instances":                                 "lc",
	"GET /1.0/instances/{name}":                           "lcp",
	"DELETE /1.0/instances/{name}":                        "lc",
	"PATCH /1.0/instances/{name}":                         "lc",
	"PUT /1.0/instances/{name}/state":                     "lc",
	"GET /1.0/instances/{name}/exec":                      "lc",
	"GET /1.0/instances/{name}/logs":                      "lc",
	"GET /1.0/instances/{name}/console":                   "lc",
	"POST /1.0/instances/{name}/files":                    "lc",
	"GET /1.0/instances/{name}/snapshots":                 "lc",
	"POST /1.0/instances/{name}/snapshots":                "lc",
	"GET /1.0/instances/{name}/snapshots/{snap}":          "lc",
	"DELETE /1.0/instances/{name}/snapshots/{snap}":       "lc",
	"POST /1.0/instances/{name}/snapshots/{snap}/restore": "lc",
	"POST /1.0/instances/{name}/migrate":                  "lc",
	"GET /1.0/images":                                     "lc",
	"POST /1.0/images":                                    "lc",
	"POST /1.0/images/build":                              "lc",
	"GET /1.0/images/{ref}":                               "lc",
	"DELETE /1.0/images/{ref}":                            "lc",
	"GET /1.0/operations":                                 "lc",
	"GET /1.0/operations/{id}":                            "lc",
	"GET /1.0/operations/{id}/wait":                       "lc",
	"DELETE /1.0/operations/{id}":                         "lc",
	"GET /1.0/storage":                                    "lc",
	"GET /1.0/metrics":                                    "lc",
	"POST /1.0/tokens":                                    "lc",
	"GET /1.0/certificates":                               "lc",
	"POST /1.0/certificates":                              "lcpu",
	"DELETE /1.0/certificates/{ref}":                      "lc",
	"GET /1.0/peers":                                      "lc",
	"POST /1.0/peers":                                     "lc",
	"DELETE /1.0/peers/{name}":                            "lc",
	"GET /1.0/migration":                                  "p",
}

var authLetters = map[trust.Auth]string{
	trust.AuthLocal:  "l",
	trust.AuthClient: "c",
	trust.AuthPeer:   "p",
	trust.AuthNone:   "u",
}

// TestRouteAccess checks allowed for every route and every auth level
// against routePolicy.
func TestRouteAccess(t *testing.T) {
	s := New(&authCore{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	seen := map[string]bool{}
	for _, rt := range s.routes() {
		key := rt.method + " " + rt.path
		seen[key] = true
		who, ok := routePolicy[key]
		if !ok {
			t.Errorf("%s: not in routePolicy; decide who may call it", key)
			continue
		}
		for a, letter := range authLetters {
			if got, want := allowed(a, rt.access), strings.Contains(who, letter); got != want {
				t.Errorf("%s as %s: allowed = %v, want %v", key, a, got, want)
			}
		}
	}
	for key := range routePolicy {
		if !seen[key] {
			t.Errorf("%s: in routePolicy but not a route", key)
		}
	}
}

// authCore is the daemon as far as TestAuthHTTP calls it; it records the
// actions that reach it.
type authCore struct {
	Core
	mu    sync.Mutex
	calls []string
}

func (f *authCore) called(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

func (f *authCore) Fingerprint() string { return "f00d" }

func (f *authCore) ServerInfo(context.Context) api.Server {
	return api.Server{APIVersion: api.Version, Host: api.HostInfo{Hostname: "alpha"}}
}

func (f *authCore) ListInstances(context.Context) ([]api.Instance, error) {
	f.called("ListInstances")
	return []api.Instance{}, nil
}

func (f *authCore) GetInstance(_ context.Context, name string) (api.Instance, error) {
	f.called("GetInstance")
	return api.Instance{Name: name, Status: api.StatusRunning}, nil
}

func (f *authCore) CreateInstance(context.Context, api.InstancesPost) (*operations.Operation, error) {
	f.called("CreateInstance")
	return nil, api.Errorf(api.ErrInvalid, "fake")
}

func (f *authCore) DeleteInstance(context.Context, string, bool) (*operations.Operation, error) {
	f.called("DeleteInstance")
	return nil, api.Errorf(api.ErrInvalid, "fake")
}

func (f *authCore) TrustCertificate(context.Context, api.CertificatePost) error {
	f.called("TrustCertificate")
	return nil
}

// authHeader carries the test's auth level to the server's authFor.
const authHeader = "X-Test-Auth"

// TestAuthHTTP: requests a level may not make are refused with 403 before
// they reach the daemon; the ones it may make get through.
func TestAuthHTTP(t *testing.T) {
	core := &authCore{}
	s := New(core, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.authFor = func(r *http.Request) trust.Auth { return trust.Auth(r.Header.Get(authHeader)) }
	srv := httptest.NewServer(s)
	defer srv.Close()

	cases := []struct {
		auth   trust.Auth
		method string
		path   string
		body   string
		status int
		call   string // the core method the request reaches, if any
	}{
		{trust.AuthPeer, "POST", "/1.0/instances", `{"name":"x"}`, http.StatusForbidden, ""},
		{trust.AuthPeer, "DELETE", "/1.0/instances/x", "", http.StatusForbidden, ""},
		{trust.AuthNone, "GET", "/1.0/instances", "", http.StatusForbidden, ""},
		{trust.AuthNone, "GET", "/1.0/instances/x", "", http.StatusForbidden, ""},
		{trust.AuthClient, "GET", "/1.0/migration", "", http.StatusForbidden, ""},
		// The public route, but only the socket and clients may add a
		// certificate without a token.
		{trust.AuthPeer, "POST", "/1.0/certificates", `{"certificate":"x","name":"y"}`, http.StatusForbidden, ""},
		{trust.AuthNone, "POST", "/1.0/certificates", `{"certificate":"x","name":"y"}`, http.StatusForbidden, ""},
		// Allowed: they reach the core.
		{trust.AuthLocal, "GET", "/1.0/instances", "", http.StatusOK, "ListInstances"},
		{trust.AuthClient, "POST", "/1.0/instances", `{"name":"x"}`, http.StatusBadRequest, "CreateInstance"},
		{trust.AuthLocal, "DELETE", "/1.0/instances/x", "", http.StatusBadRequest, "DeleteInstance"},
		{trust.AuthPeer, "GET", "/1.0/instances/x", "", http.StatusOK, "GetInstance"},
		{trust.AuthClient, "POST", "/1.0/certificates", `{"certificate":"x","name":"y"}`, http.StatusCreated, "TrustCertificate"},
		{trust.AuthNone, "GET", "/1.0", "", http.StatusOK, ""},
	}
	for _, c := range cases {
		name := string(c.auth) + " " + c.method + " " + c.path
		core.calls = nil
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(authHeader, string(c.auth))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env api.Response
		err = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: decode reply: %v", name, err)
		}
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d (%s), want %d", name, resp.StatusCode, env.Error, c.status)
		}
		if c.status == http.StatusForbidden && (env.Type != api.ResponseError || env.ErrorCode != http.StatusForbidden) {
			t.Errorf("%s: reply %+v, want a 403 error envelope", name, env)
		}
		core.mu.Lock()
		calls := strings.Join(core.calls, ",")
		core.mu.Unlock()
		if calls != c.call {
			t.Errorf("%s: reached the core as %q, want %q", name, calls, c.call)
		}
	}
}

// TestServerInfoByAuth: an untrusted caller learns only the API version
// and the fingerprint.
func TestServerInfoByAuth(t *testing.T) {
	s := New(&authCore{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for a, wantHost := range map[trust.Auth]bool{trust.AuthLocal: true, trust.AuthClient: true, trust.AuthPeer: true, trust.AuthNone: false} {
		s.authFor = func(*http.Request) trust.Auth { return a }
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "/1.0", nil))
		var env api.Response
		var srv api.Server
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(env.Metadata, &srv); err != nil {
			t.Fatal(err)
		}
		if srv.Auth != string(a) || srv.Fingerprint != "f00d" || (srv.Host.Hostname != "") != wantHost {
			t.Errorf("as %s: %+v", a, srv)
		}
	}
}
