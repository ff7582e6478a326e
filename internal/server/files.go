package server

import (
	"net/http"
	"strconv"

	"github.com/vesselhost/vessel/internal/api"
)

// pushFile writes the request's body to a file in an instance (see
// api.FileUIDHeader for the headers).
func (s *Server) pushFile(r *http.Request) response {
	o, err := filePushHeaders(r.Header)
	if err != nil {
		return errorResponse{err}
	}
	path := r.URL.Query().Get("path")
	if path == "" {
		return errorResponse{api.Errorf(api.ErrInvalid, "no path= for the file")}
	}
	if err := s.core.PushFile(r.Context(), r.PathValue("name"), path, r.Body, o); err != nil {
		return errorResponse{err}
	}
	return nil
}

func filePushHeaders(h http.Header) (api.FilePush, error) {
	var o api.FilePush
	for _, f := range []struct {
		header string
		base   int
		dst    *uint32
	}{
		{api.FileUIDHeader, 10, &o.UID},
		{api.FileGIDHeader, 10, &o.GID},
		{api.FileModeHeader, 8, &o.Mode},
	} {
		v := h.Get(f.header)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, f.base, 32)
		if err != nil || (f.dst == &o.Mode && n > 0o7777) {
			return o, api.Errorf(api.ErrInvalid, "%s: %q", f.header, v)
		}
		*f.dst = uint32(n)
	}
	return o, nil
}
