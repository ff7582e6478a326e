// Package api holds vessel's REST wire types: what the daemon sends and the
// client decodes. It imports nothing from the daemon, so the CLI and other
// clients depend only on this package and package client.
//
// Conventions (Incus-style):
//
//   - Everything lives under /1.0.
//   - A synchronous reply is {"type":"sync","status_code":200,"metadata":...}.
//   - Long work replies 202 {"type":"async","operation":"/1.0/operations/ID",
//     "metadata":Operation}; the operation can be polled, waited on
//     (GET .../wait?timeout=SECONDS) and cancelled (DELETE).
//   - Errors are {"type":"error","error":"message","error_code":HTTP status};
//     an error of one of the kinds in errors.go (ErrInvalid, ErrNotFound,
//     ErrConflict, ErrForbidden) has that kind's status.
//   - Interactive streams (exec) run over a websocket; see ExecPost.
package api

// Version is the REST API version, the first path element.
const Version = "1.0"
