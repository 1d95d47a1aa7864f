package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/proto/weirv1"
)

// limiterService implements weirv1.LimiterServer.
type limiterService struct {
	weirv1.UnimplementedLimiterServer
	s *Server
}

var _ weirv1.LimiterServer = (*limiterService)(nil)

// itemProblem describes what is wrong with an item's shape, or "".
func itemProblem(it *weirv1.CheckItem) string {
	switch {
	case it == nil:
		return "item is missing"
	case it.GetKey() == "":
		return "key: must not be empty"
	case len(it.GetKey()) > MaxKeyLen:
		return fmt.Sprintf("key: is %d bytes long; at most %d", len(it.GetKey()), MaxKeyLen)
	case it.GetRule() == "":
		return "rule: must not be empty"
	case it.GetCost() < 0:
		return fmt.Sprintf("cost: %d is negative (0 peeks, more takes tokens)", it.GetCost())
	}
	return ""
}

// wellFormed reports whether no item has a problem.
func wellFormed(items []*weirv1.CheckItem) bool {
	for _, it := range items {
		if itemProblem(it) != "" {
			return false
		}
	}
	return true
}

// Check validates each item's shape and sends the well-formed ones to the
// Backend; malformed items get an INVALID_ARGUMENT result of their own.
func (l *limiterService) Check(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	results, err := l.check(ctx, req.GetItems())
	if err != nil {
		return nil, err
	}
	return &weirv1.CheckResponse{Results: results}, nil
}

// CheckStream decides each request of the stream exactly as Check would,
// in order, and answers it with the request's id (checkstream.Serve).
func (l *limiterService) CheckStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	return checkstream.Serve(stream, l.check)
}

// check is Check's decision for items: one result per item, in order, or a
// gRPC status error for the request as a whole.
func (l *limiterService) check(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	if len(items) > MaxItems {
		return nil, status.Errorf(codes.InvalidArgument, "items: %d in one request; at most %d (split the batch)", len(items), MaxItems)
	}
	if len(items) > 0 && wellFormed(items) {
		// The common case: every item is well formed, so the Backend's
		// results are the response as they are.
		got, err := l.s.b.Check(ctx, items)
		if err != nil {
			return nil, grpcError(err)
		}
		if len(got) != len(items) {
			return nil, status.Errorf(codes.Internal, "backend answered %d results for %d items", len(got), len(items))
		}
		return got, nil
	}
	results := make([]*weirv1.CheckResult, len(items))
	valid := make([]*weirv1.CheckItem, 0, len(items))
	where := make([]int, 0, len(items))
	for i, it := range items {
		if p := itemProblem(it); p != "" {
			results[i] = &weirv1.CheckResult{ErrorCode: weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Error: p, RetryAfterMs: -1}
			continue
		}
		valid = append(valid, it)
		where = append(where, i)
	}
	if len(valid) > 0 {
		got, err := l.s.b.Check(ctx, valid)
		if err != nil {
			return nil, grpcError(err)
		}
		if len(got) != len(valid) {
			return nil, status.Errorf(codes.Internal, "backend answered %d results for %d items", len(got), len(valid))
		}
		for j, r := range got {
			results[where[j]] = r
		}
	}
	return results, nil
}

// GetLimits reports a key's quota under every rule, taking nothing.
func (l *limiterService) GetLimits(ctx context.Context, req *weirv1.GetLimitsRequest) (*weirv1.GetLimitsResponse, error) {
	if p := itemProblem(&weirv1.CheckItem{Key: req.GetKey(), Rule: "-"}); p != "" {
		return nil, status.Error(codes.InvalidArgument, p)
	}
	ls, err := l.s.b.GetLimits(ctx, req.GetKey())
	if err != nil {
		return nil, grpcError(err)
	}
	return &weirv1.GetLimitsResponse{Limits: ls}, nil
}
