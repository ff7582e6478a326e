package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/vesselhost/vessel/internal/api"
)

// maxWait bounds one wait request; clients loop for longer waits.
const maxWait = 5 * time.Minute

func (s *Server) listOperations(r *http.Request) response {
	ops := s.core.Operations().List()
	out := make([]api.Operation, 0, len(ops))
	for _, op := range ops {
		out = append(out, op.Render())
	}
	return syncResponse{metadata: out}
}

func (s *Server) getOperation(r *http.Request) response {
	op, err := s.core.Operations().Get(r.PathValue("id"))
	if err != nil {
		return errorResponse{err}
	}
	return syncResponse{metadata: op.Render()}
}

// waitOperation returns when the operation is done or after ?timeout=
// seconds (fractions allowed; default and cap 5 minutes), whichever is first.
func (s *Server) waitOperation(r *http.Request) response {
	op, err := s.core.Operations().Get(r.PathValue("id"))
	if err != nil {
		return errorResponse{err}
	}
	timeout := maxWait
	if t := r.URL.Query().Get("timeout"); t != "" {
		secs, err := strconv.ParseFloat(t, 64)
		if err != nil || secs < 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return errorResponse{errBadRequestf("bad timeout %q: want seconds, 0 or more", t)}
		}
		// Capped before the conversion: a huge number of seconds would
		// overflow time.Duration into a negative wait.
		if secs < maxWait.Seconds() {
			timeout = time.Duration(secs * float64(time.Second))
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	_ = op.Wait(ctx)
	return syncResponse{metadata: op.Render()}
}

func (s *Server) cancelOperation(r *http.Request) response {
	op, err := s.core.Operations().Get(r.PathValue("id"))
	if err != nil {
		return errorResponse{err}
	}
	op.Cancel()
	return syncResponse{metadata: op.Render()}
}
