package server

import (
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
)

func (s *Server) listSnapshots(r *http.Request) response {
	snaps, err := s.core.ListSnapshots(r.Context(), r.PathValue("name"))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: snaps}
}

func (s *Server) getSnapshot(r *http.Request) response {
	snap, err := s.core.GetSnapshot(r.Context(), r.PathValue("name"), r.PathValue("snap"))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: snap}
}

func (s *Server) createSnapshot(r *http.Request) response {
	var req api.SnapshotsPost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.CreateSnapshot(r.Context(), r.PathValue("name"), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

func (s *Server) deleteSnapshot(r *http.Request) response {
	op, err := s.core.DeleteSnapshot(r.Context(), r.PathValue("name"), r.PathValue("snap"))
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

func (s *Server) restoreSnapshot(r *http.Request) response {
	var req api.SnapshotRestorePost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.RestoreSnapshot(r.Context(), r.PathValue("name"), r.PathValue("snap"), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}
