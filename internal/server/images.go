package server

import (
	"net/http"

	"github.com/vesselhost/vessel/internal/api"
)

func (s *Server) listImages(r *http.Request) response {
	imgs, err := s.core.ListImages(r.Context())
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: imgs}
}

func (s *Server) getImage(r *http.Request) response {
	img, err := s.core.GetImage(r.Context(), r.PathValue("ref"))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: img}
}

// importImage takes the image file as the request body (a rootfs tarball
// or a tarred OCI layout, optionally compressed).
func (s *Server) importImage(r *http.Request) response {
	img, err := s.core.ImportImage(r.Context(), r.Body, r.Header.Get(api.ImageAliasHeader))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{status: http.StatusCreated, metadata: img}
}

func (s *Server) buildImage(r *http.Request) response {
	var req api.ImageBuildPost
	if err := decode(r, &req); err != nil {
		return errorResponse{err}
	}
	op, err := s.core.BuildImage(r.Context(), req)
	if err != nil {
		return errorResponse{err}
	}
	return asyncResponse{op}
}

func (s *Server) deleteImage(r *http.Request) response {
	if err := s.core.DeleteImage(r.Context(), r.PathValue("ref")); err != nil {
		return errorResponse{err}
	}
	return nil
}

func (s *Server) getStorage(r *http.Request) response {
	pool, err := s.core.StoragePool(r.Context())
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: pool}
}
