package limit

import (
	"errors"
	"fmt"
)

// The kinds of error an edge maps to a status (node/api: one function per
// wire). Errors carry them through %w wrapping or Errorf; an error with none
// of them is internal.
var (
	// ErrInvalid: the request is malformed or breaks a rule of the model;
	// nothing changed (gRPC InvalidArgument, HTTP 400).
	ErrInvalid = errors.New("limit: invalid argument")
	// ErrNotFound: a named rule, override, version or endpoint does not
	// exist (NotFound, 404).
	ErrNotFound = errors.New("limit: not found")
	// ErrUnavailable: the answer cannot be given now (no ring yet, owner
	// unreachable, shutting down, timeout); the caller may retry
	// (Unavailable, 503).
	ErrUnavailable = errors.New("limit: unavailable")
	// ErrClosed: the component is shutting down. It is also ErrUnavailable.
	ErrClosed = Errorf(ErrUnavailable, "limit: closed")
	// ErrNotLeader: a rule write or consistent read needs the Raft leader,
	// and it could not be forwarded there (FailedPrecondition, 503
	// not_leader).
	ErrNotLeader = errors.New("limit: not the leader")
	// ErrUnauthenticated: a write lacks the admin token (Unauthenticated,
	// 401).
	ErrUnauthenticated = errors.New("limit: unauthenticated")
	// ErrTooLarge: the request is larger than allowed (ResourceExhausted,
	// 413).
	ErrTooLarge = errors.New("limit: too large")
	// ErrConflict: the request conflicts with the current state (Aborted,
	// 409).
	ErrConflict = errors.New("limit: conflict")
)

// Errorf returns an error of kind whose message is the formatted text
// alone (with %w wrapping as in fmt.Errorf): errors.Is(err, kind) holds, and
// so does errors.Is for whatever the format wraps. Packages mark their own
// sentinels with it, e.g.
//
//	ErrNotFound = limit.Errorf(limit.ErrNotFound, "rulesraft: not found")
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// kindError is an error with its own message, marked with a kind.
type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
