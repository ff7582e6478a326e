package server

import (
	"bufio"
	"net/http"
	"strconv"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/trust"
)

// getServer describes the server; an untrusted caller learns only the API
// version and the server's fingerprint.
func (s *Server) getServer(r *http.Request) response {
	a := authOf(r)
	if !allowed(a, accessClient) && a != trust.AuthPeer {
		return syncResponse{metadata: api.Server{APIVersion: api.Version, Auth: string(a), Fingerprint: s.core.Fingerprint()}}
	}
	srv := s.core.ServerInfo(r.Context())
	srv.Auth, srv.Fingerprint = string(a), s.core.Fingerprint()
	return syncResponse{metadata: srv}
}

func (s *Server) listInstances(r *http.Request) response {
	insts, err := s.core.ListInstances(r.Context())
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: insts}
}

func (s *Server) createInstance(r *http.Request) response {
	var req api.InstancesPost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.CreateInstance(r.Context(), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

func (s *Server) getInstance(r *http.Request) response {
	inst, err := s.core.GetInstance(r.Context(), r.PathValue("name"))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: inst}
}

func (s *Server) deleteInstance(r *http.Request) response {
	force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	op, err := s.core.DeleteInstance(r.Context(), r.PathValue("name"), force)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

// patchInstance changes configuration keys (limits apply live).
func (s *Server) patchInstance(r *http.Request) response {
	var req api.InstancePatch
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.UpdateInstance(r.Context(), r.PathValue("name"), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

func (s *Server) putInstanceState(r *http.Request) response {
	var req api.InstanceStatePut
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.ChangeState(r.Context(), r.PathValue("name"), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

// instanceLogs streams the console log as text/plain; ?follow=1 keeps the
// stream open for new output.
func (s *Server) instanceLogs(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	if _, err := s.core.GetInstance(r.Context(), name); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	bw := &flushWriter{w: bufio.NewWriter(w), f: w.(http.Flusher)}
	if err := s.core.Logs(r.Context(), name, follow, bw); err != nil {
		s.log.Warn("log stream", "name", name, "err", err)
	}
	bw.Flush()
	return nil
}

type flushWriter struct {
	w *bufio.Writer
	f http.Flusher
}

func (f *flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }

// Flush pushes buffered output to the client.
func (f *flushWriter) Flush() {
	_ = f.w.Flush()
	f.f.Flush()
}

func (s *Server) migrateInstance(r *http.Request) response {
	var req api.InstanceMigratePost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.MigrateInstance(r.Context(), r.PathValue("name"), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}
