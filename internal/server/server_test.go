package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

func TestStatusFor(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", api.ErrInvalid), http.StatusBadRequest},
		{api.Errorf(api.ErrInvalid, "bad name %q", "-x"), http.StatusBadRequest},
		{errBadRequestf("bad timeout %q", "x"), http.StatusBadRequest},
		{fmt.Errorf("x: %w", api.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("x: %w", state.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("x: %w", operations.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("x: %w", storage.ErrVolumeNotFound), http.StatusNotFound},
		{errNotFoundRoute, http.StatusNotFound},
		{errForbidden, http.StatusForbidden},
		{api.Errorf(api.ErrForbidden, "bad token"), http.StatusForbidden},
		{fmt.Errorf("x: %w", api.ErrConflict), http.StatusConflict},
		{fmt.Errorf("x: %w", state.ErrExists), http.StatusConflict},
		{fmt.Errorf("x: %w", storage.ErrVolumeExists), http.StatusConflict},
		{fmt.Errorf("x: %w", network.ErrAddressInUse), http.StatusConflict},
		{api.Errorf(api.ErrTooLarge, "request body larger than %d bytes", 10), http.StatusRequestEntityTooLarge},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), http.StatusGatewayTimeout},
		{fmt.Errorf("snapshot of %q: %w", "c1", context.Canceled), api.StatusCanceled},
		// A kind wins over the context error it wraps.
		{api.Errorf(api.ErrConflict, "busy: %w", context.Canceled), http.StatusConflict},
		{errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, c := range cases {
		if got := statusFor(c.err); got != c.want {
			t.Errorf("statusFor(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
