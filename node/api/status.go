package api

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/authz"
)

// HTTP error codes (the "code" field of an error body).
const (
	CodeInvalidArgument = "invalid_argument"
	CodeNotFound        = "not_found"
	CodeUnauthorized    = "unauthorized"
	CodeUnavailable     = "unavailable"
	CodeNotLeader       = "not_leader"
	CodeConflict        = "conflict"
	CodeTooLarge        = "too_large"
	CodeInternal        = "internal"
	CodeForbidden       = "forbidden"
)

// Every error a Weir node reports carries a limit kind (limit.ErrInvalid,
// limit.ErrUnavailable, ...) or a context error; each wire maps them in one
// function: GRPCError for gRPC (and fromGRPC, its inverse, for the answers
// of a gRPC peer), HTTPStatus for HTTP. An error of no kind is internal.

// HTTPStatus is the HTTP status and error code the HTTP API answers err
// with. It is the only place that picks them.
//
// limit.ErrNotLeader means "not the leader, and forwarding was not
// possible" (503 not_leader); limit.ErrTooLarge "request too large".
func HTTPStatus(err error) (int, string) {
	switch {
	case err == nil:
		return http.StatusOK, ""
	case errors.Is(err, limit.ErrInvalid):
		return http.StatusBadRequest, CodeInvalidArgument
	case errors.Is(err, limit.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, limit.ErrUnauthenticated):
		return http.StatusUnauthorized, CodeUnauthorized
	case errors.Is(err, authz.ErrForbidden):
		return http.StatusForbidden, CodeForbidden
	case errors.Is(err, limit.ErrNotLeader):
		return http.StatusServiceUnavailable, CodeNotLeader
	case errors.Is(err, limit.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, limit.ErrConflict):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, limit.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, CodeUnsupportedMediaType
	default:
		return http.StatusInternalServerError, CodeInternal
	}
}

// GRPCError is err as a gRPC status error, the code chosen by its kind.
// It is the only place that picks gRPC codes (node's peer server calls it
// too). An error that came from a gRPC peer (see fromGRPC) keeps the
// peer's status. The message is err's.
func GRPCError(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	var c codes.Code
	switch {
	case errors.Is(err, limit.ErrInvalid):
		c = codes.InvalidArgument
	case errors.Is(err, limit.ErrNotFound):
		c = codes.NotFound
	case errors.Is(err, limit.ErrUnauthenticated):
		c = codes.Unauthenticated
	case errors.Is(err, limit.ErrNotLeader):
		c = codes.FailedPrecondition
	case errors.Is(err, limit.ErrUnavailable): // before the context errors: a Raft timeout wraps both
		c = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		c = codes.Canceled
	case errors.Is(err, limit.ErrConflict):
		c = codes.Aborted
	case errors.Is(err, limit.ErrTooLarge):
		c = codes.ResourceExhausted
	default:
		c = codes.Internal
	}
	return status.Error(c, err.Error())
}

// fromGRPC turns the error of a gRPC call (the leader's answer to a
// forwarded write) into an error of the kind its code says, with the
// status message as its message; GRPCError gives the status back as it
// came. Other errors pass unchanged.
func fromGRPC(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	return &wireError{st: st}
}

// wireError is a gRPC peer's error status.
type wireError struct{ st *status.Status }

func (e *wireError) Error() string              { return e.st.Message() }
func (e *wireError) GRPCStatus() *status.Status { return e.st }

// Unwrap is the kind of the status code: GRPCError's mapping, inverted.
func (e *wireError) Unwrap() error {
	switch e.st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return limit.ErrInvalid
	case codes.NotFound:
		return limit.ErrNotFound
	case codes.Unauthenticated, codes.PermissionDenied:
		return limit.ErrUnauthenticated
	case codes.FailedPrecondition:
		return limit.ErrNotLeader
	case codes.Unavailable:
		return limit.ErrUnavailable
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Canceled:
		return context.Canceled
	case codes.AlreadyExists, codes.Aborted:
		return limit.ErrConflict
	case codes.ResourceExhausted:
		return limit.ErrTooLarge
	}
	return nil
}
