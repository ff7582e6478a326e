// Package server is vessel's REST API: it translates HTTP requests into the
// daemon's actions and their results into Incus-style JSON envelopes. It
// holds no state of its own.
//
// Routes are declared as data (routes.go); errors are mapped to HTTP status
// codes in one function (statusFor).
package server

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/trust"
)

// Core is what the API needs from the daemon.
type Core interface {
	ServerInfo(ctx context.Context) api.Server
	ListInstances(ctx context.Context) ([]api.Instance, error)
	GetInstance(ctx context.Context, name string) (api.Instance, error)
	CreateInstance(ctx context.Context, req api.InstancesPost) (*operations.Operation, error)
	ChangeState(ctx context.Context, name string, req api.InstanceStatePut) (*operations.Operation, error)
	DeleteInstance(ctx context.Context, name string, force bool) (*operations.Operation, error)
	UpdateInstance(ctx context.Context, name string, req api.InstancePatch) (*operations.Operation, error)
	Exec(ctx context.Context, name string, req api.ExecPost, stdio api.ExecIO) (int, error)
	PushFile(ctx context.Context, name, path string, r io.Reader, o api.FilePush) error
	Logs(ctx context.Context, name string, follow bool, w io.Writer) error
	// Console attaches stdio to a running VM's serial console until ctx
	// ends or the VM stops.
	Console(ctx context.Context, name string, stdio api.ExecIO) error
	ListImages(ctx context.Context) ([]api.Image, error)
	GetImage(ctx context.Context, ref string) (api.Image, error)
	ImportImage(ctx context.Context, r io.Reader, alias string) (api.Image, error)
	BuildImage(ctx context.Context, req api.ImageBuildPost) (*operations.Operation, error)
	DeleteImage(ctx context.Context, ref string) error
	StoragePool(ctx context.Context) (api.StoragePool, error)
	ListSnapshots(ctx context.Context, name string) ([]api.Snapshot, error)
	GetSnapshot(ctx context.Context, name, snap string) (api.Snapshot, error)
	CreateSnapshot(ctx context.Context, name string, req api.SnapshotsPost) (*operations.Operation, error)
	DeleteSnapshot(ctx context.Context, name, snap string) (*operations.Operation, error)
	RestoreSnapshot(ctx context.Context, name, snap string, req api.SnapshotRestorePost) (*operations.Operation, error)
	Operations() *operations.Registry

	Authenticate(cert *x509.Certificate) (trust.Auth, string)
	Fingerprint() string
	IssueToken(ctx context.Context, req api.TokenPost) (api.TokenResponse, error)
	Join(ctx context.Context, cert *x509.Certificate, secret string) error
	TrustCertificate(ctx context.Context, req api.CertificatePost) error
	ListTrust(ctx context.Context) ([]api.Certificate, error)
	RemoveTrust(ctx context.Context, ref string) error
	AddPeer(ctx context.Context, req api.PeerPost) (api.Peer, error)
	ListPeers(ctx context.Context) ([]api.Peer, error)
	RemovePeer(ctx context.Context, name string) error
	MigrateInstance(ctx context.Context, name string, req api.InstanceMigratePost) (*operations.Operation, error)
	// AcceptMigration serves an incoming migration session from the named
	// peer in the background; it owns conn.
	AcceptMigration(peer string, conn net.Conn)
	// AcceptPageLink hands an incoming page link (a post-copy move's
	// memory, migration.PagesProtocol) from the named peer to its move;
	// it owns conn.
	AcceptPageLink(peer string, conn net.Conn)
}

// Server serves the API of one daemon.
type Server struct {
	core Core
	log  *slog.Logger
	mux  *http.ServeMux
	// metricsHandler serves GET /1.0/metrics (metrics.go).
	metricsHandler http.Handler
	// authFor decides what a request may do (auth.go).
	authFor func(r *http.Request) trust.Auth
}

// New returns the API handler for core.
func New(core Core, log *slog.Logger) *Server {
	s := &Server{core: core, log: log, mux: http.NewServeMux(), metricsHandler: newMetricsHandler(core, log)}
	s.authFor = s.authByConnection
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFoundRoute)
	})
	return s
}

var errNotFoundRoute = api.Errorf(api.ErrNotFound, "not found: no such API endpoint")

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// response is what a handler returns; it knows how to write itself.
type response interface {
	render(w http.ResponseWriter)
}

type syncResponse struct {
	status   int
	metadata any
}

func (s syncResponse) render(w http.ResponseWriter) {
	md, err := json.Marshal(s.metadata)
	if err != nil {
		writeError(w, err)
		return
	}
	if s.status == 0 {
		s.status = http.StatusOK
	}
	writeJSON(w, s.status, api.Response{Type: api.ResponseSync, Status: http.StatusText(s.status), StatusCode: s.status, Metadata: md})
}

type asyncResponse struct{ op *operations.Operation }

func (a asyncResponse) render(w http.ResponseWriter) {
	md, _ := json.Marshal(a.op.Render())
	w.Header().Set("Location", a.op.URL())
	writeJSON(w, http.StatusAccepted, api.Response{
		Type: api.ResponseAsync, Status: "Operation created", StatusCode: http.StatusAccepted,
		Operation: a.op.URL(), Metadata: md,
	})
}

type errorResponse struct{ err error }

func (e errorResponse) render(w http.ResponseWriter) { writeError(w, e.err) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code := statusFor(err)
	writeJSON(w, code, api.Response{Type: api.ResponseError, Error: err.Error(), ErrorCode: code})
}

// statusFor maps an error to its HTTP status: the one place that does. The
// API's error kinds come first, so that an error of a kind which also wraps
// a context error (a conflict found while waiting) keeps its kind's status.
func statusFor(err error) int {
	switch {
	case errors.Is(err, api.ErrNotFound),
		errors.Is(err, state.ErrNotFound),
		errors.Is(err, operations.ErrNotFound),
		errors.Is(err, storage.ErrVolumeNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, api.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, api.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, api.ErrConflict),
		errors.Is(err, state.ErrExists),
		errors.Is(err, storage.ErrVolumeExists),
		errors.Is(err, network.ErrAddressInUse):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return api.StatusCanceled
	}
	return http.StatusInternalServerError
}

// errBadRequestf is a 400 with a message.
func errBadRequestf(format string, args ...any) error {
	return api.Errorf(api.ErrInvalid, format, args...)
}

// errForbidden refuses a caller the route is not for.
var errForbidden = api.Errorf(api.ErrForbidden, "forbidden: this certificate is not trusted here (see 'vessel remote add' and 'vessel trust')")

func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r = s.authenticate(r)
		if !allowed(authOf(r), rt.access) {
			writeError(w, errForbidden)
			s.log.Info("api refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "auth", authOf(r))
			return
		}
		s.limitRequest(w, r, rt)
		if rt.stream != nil {
			if err := rt.stream(w, r); err != nil {
				writeError(w, err)
				s.log.Info("api error", "method", r.Method, "path", r.URL.Path, "status", statusFor(err), "err", err)
			}
			return
		}
		resp := rt.handler(r)
		if resp == nil {
			resp = syncResponse{metadata: struct{}{}}
		}
		resp.render(w)
		if e, ok := resp.(errorResponse); ok {
			s.log.Info("api error", "method", r.Method, "path", r.URL.Path, "status", statusFor(e.err), "err", e.err)
		} else {
			s.log.Debug("api", "method", r.Method, "path", r.URL.Path, "took", time.Since(start))
		}
	})
}

// decode reads a JSON body into v, refusing unknown fields. The body is
// bounded by MaxJSONBody (wrap): a longer one is ErrTooLarge (413).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return api.Errorf(api.ErrTooLarge, "request body larger than %d bytes", mbe.Limit)
		}
		return api.Errorf(api.ErrInvalid, "bad request: %w", err)
	}
	return nil
}
