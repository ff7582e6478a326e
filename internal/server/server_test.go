package server

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/vesselhost/vessel/internal/daemon"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

func TestStatusFor(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", daemon.ErrInvalid), http.StatusBadRequest},
		{errors.Join(errBadRequest, errors.New("json")), http.StatusBadRequest},
		{fmt.Errorf("x: %w", daemon.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("x: %w", state.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("x: %w", operations.ErrNotFound), http.StatusNotFound},
		{errNotFoundRoute, http.StatusNotFound},
		{fmt.Errorf("x: %w", daemon.ErrConflict), http.StatusConflict},
		{fmt.Errorf("x: %w", storage.ErrVolumeExists), http.StatusConflict},
		{conflictError{"busy"}, http.StatusConflict},
		{errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, c := range cases {
		if got := statusFor(c.err); got != c.want {
			t.Errorf("statusFor(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
