package daemon

import (
	"errors"
	"fmt"
)

// Error kinds of the daemon's actions. The API layer maps them (and the
// storage/state/network sentinels they wrap) to HTTP status codes in one
// place.
var (
	// ErrInvalid says the request is malformed (bad name, bad value).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound says a named object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict says the object's state forbids the action (already
	// exists, running, stopped, busy).
	ErrConflict = errors.New("conflict")
	// ErrForbidden says the caller may not do this (untrusted, bad token).
	ErrForbidden = errors.New("forbidden")
)

// kindError is an error of a kind (ErrInvalid, ...) whose message is only
// its own text: users read "instance "web1" is not running", not
// "conflict: ...", while errors.Is still finds the kind.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// errorf formats an error of the given kind; %w works as in fmt.Errorf.
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}
