package api

import (
	"errors"
	"fmt"
)

// Error kinds: the part of an error that the API contract carries. The
// server answers an error of a kind with its status code (400, 404, 409,
// 403); the client maps an error reply's code back to the kind, so
// errors.Is(err, api.ErrNotFound) holds on both sides of the connection.
// ErrTooLarge is 413.
var (
	// ErrInvalid says the request is malformed (bad name, bad value): 400.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound says a named object does not exist: 404.
	ErrNotFound = errors.New("not found")
	// ErrConflict says the object's state forbids the action (already
	// exists, running, stopped, busy): 409.
	ErrConflict = errors.New("conflict")
	// ErrForbidden says the caller may not do this (untrusted, bad
	// token): 403.
	ErrForbidden = errors.New("forbidden")
	// ErrTooLarge says the request (a JSON body, an image once
	// decompressed) is larger than the server accepts: 413.
	ErrTooLarge = errors.New("too large")
)

// StatusCanceled is the status of an error reply whose work was cancelled
// (context.Canceled): nginx's non-standard 499 "client closed request". A
// cancelled request is neither the caller's mistake (400) nor a failure of
// the server (500). Usually nobody reads such a reply (the caller went
// away); when the daemon cancelled the work itself (shutdown), the client
// maps 499 back to context.Canceled.
const StatusCanceled = 499

// kindError is an error of a kind (ErrInvalid, ...) whose message is only
// its own text: users read "instance "web1" is not running", not
// "conflict: ...", while errors.Is still finds the kind.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// Errorf formats an error of the given kind: its message is only the
// formatted text, and errors.Is finds both kind and whatever %w wraps (%w
// works as in fmt.Errorf). kind is one of the kinds above, or another
// sentinel a caller tests for (the client marks a cancelled operation's
// error with context.Canceled).
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}
