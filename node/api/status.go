package api

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
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
)

// HTTPStatus maps a gRPC code to the HTTP status and error code the HTTP
// API answers with. It is the only place that does.
//
// FailedPrecondition means "not the leader, and forwarding was not
// possible"; ResourceExhausted means "request too large".
func HTTPStatus(c codes.Code) (int, string) {
	switch c {
	case codes.OK:
		return http.StatusOK, ""
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest, CodeInvalidArgument
	case codes.NotFound:
		return http.StatusNotFound, CodeNotFound
	case codes.Unauthenticated, codes.PermissionDenied:
		return http.StatusUnauthorized, CodeUnauthorized
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return http.StatusServiceUnavailable, CodeUnavailable
	case codes.FailedPrecondition:
		return http.StatusServiceUnavailable, CodeNotLeader
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict, CodeConflict
	case codes.ResourceExhausted:
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	default:
		return http.StatusInternalServerError, CodeInternal
	}
}

// grpcError turns an error from the store or the backend into a gRPC
// status error. Status errors (e.g. from a forwarded call) pass unchanged.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var c codes.Code
	switch {
	case errors.Is(err, rulesraft.ErrInvalid), errors.Is(err, rules.ErrInvalid):
		c = codes.InvalidArgument
	case errors.Is(err, rulesraft.ErrNotFound), errors.Is(err, rulesraft.ErrVersionGone):
		c = codes.NotFound
	case errors.Is(err, rulesraft.ErrNotLeader):
		c = codes.FailedPrecondition
	case errors.Is(err, rulesraft.ErrTimeout), errors.Is(err, rulesraft.ErrClosed):
		c = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		c = codes.Canceled
	default:
		c = codes.Internal
	}
	return status.Error(c, err.Error())
}
