package daemon

import "github.com/vesselhost/vessel/internal/api"

// Error kinds of the daemon's actions: the API's kinds (package api), under
// the names the daemon has always used. The API layer maps them (and the
// storage/state/network sentinels they wrap) to HTTP status codes in one
// place.
var (
	// ErrInvalid says the request is malformed (bad name, bad value).
	ErrInvalid = api.ErrInvalid
	// ErrNotFound says a named object does not exist.
	ErrNotFound = api.ErrNotFound
	// ErrConflict says the object's state forbids the action (already
	// exists, running, stopped, busy).
	ErrConflict = api.ErrConflict
	// ErrForbidden says the caller may not do this (untrusted, bad token).
	ErrForbidden = api.ErrForbidden
)

// errorf formats an error of the given kind (see api.Errorf): its message
// is only its own text, errors.Is finds the kind; %w works as in
// fmt.Errorf.
func errorf(kind error, format string, args ...any) error {
	return api.Errorf(kind, format, args...)
}
