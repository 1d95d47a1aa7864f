package api

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	"github.com/weirlimit/weir/proto/weirv1"
)

// limiterService implements weirv1.LimiterServer: proto in, Server.check,
// proto out.
type limiterService struct {
	weirv1.UnimplementedLimiterServer
	s       *Server
	batches limitpb.BatchPool // request items and results, recycled (Backend.Check keeps neither)
}

var _ weirv1.LimiterServer = (*limiterService)(nil)

// Check decides a batch; malformed items get an INVALID_ARGUMENT result of
// their own (Server.check).
func (l *limiterService) Check(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	results, err := l.check(ctx, req.GetItems())
	if err != nil {
		return nil, err
	}
	return &weirv1.CheckResponse{Results: results}, nil
}

// CheckStream decides each request of the stream exactly as Check would,
// in order, and answers it with the request's id (checkstream.Serve).
// The stream's answers reuse one set of result messages (limitpb.ResultBuf).
func (l *limiterService) CheckStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	var buf limitpb.ResultBuf
	return checkstream.Serve(stream, func(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
		return l.checkInto(ctx, items, &buf)
	})
}

// check is Check's decision for items: one result per item, in order, or a
// gRPC status error for the request as a whole.
func (l *limiterService) check(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	return l.checkInto(ctx, items, nil)
}

// checkInto is check with the results converted into buf's messages (nil:
// fresh ones).
func (l *limiterService) checkInto(ctx context.Context, items []*weirv1.CheckItem, buf *limitpb.ResultBuf) ([]*weirv1.CheckResult, error) {
	b := l.batches.FromProto(items)
	defer l.batches.Put(b)
	for i := range b.Items { // per-check limits and releases are set by nodes only
		b.Items[i].Override, b.Items[i].Release = nil, nil
	}
	ctx = tracing.FromGRPC(ctx, metadata.ValueFromIncomingContext) // the caller's trace, if it sent one
	if err := l.s.check(ctx, b.Items, b.Results); err != nil {
		return nil, GRPCError(err)
	}
	if buf != nil {
		return buf.ToProto(b.Results), nil
	}
	return limitpb.ResultsToProto(b.Results), nil
}

// Release gives back permits of concurrency rules, each on its key's
// owner (Server.release); a malformed item gets an error result of its own.
func (l *limiterService) Release(ctx context.Context, req *weirv1.ReleaseRequest) (*weirv1.ReleaseResponse, error) {
	in := req.GetItems()
	items := make([]releaseItem, len(in))
	for i, p := range in {
		items[i] = releaseItem{key: p.GetKey(), rule: p.GetRule()}
		items[i].permit, items[i].bad = limit.PermitFromBytes(p.GetPermit())
	}
	res, err := l.s.release(ctx, items)
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &weirv1.ReleaseResponse{Results: make([]*weirv1.ReleaseResult, len(res))}
	for i := range res {
		out.Results[i] = &weirv1.ReleaseResult{Released: res[i].Allowed, ErrorCode: limitpb.CodeToProto(res[i].Code), Error: res[i].Err}
	}
	return out, nil
}

// GetLimits reports a key's quota under every rule, taking nothing.
func (l *limiterService) GetLimits(ctx context.Context, req *weirv1.GetLimitsRequest) (*weirv1.GetLimitsResponse, error) {
	ls, err := l.s.getLimits(ctx, req.GetKey())
	if err != nil {
		return nil, GRPCError(err)
	}
	block := make([]weirv1.CheckResult, len(ls))
	out := &weirv1.GetLimitsResponse{Limits: make([]*weirv1.KeyLimit, len(ls))}
	for i := range ls {
		limitpb.ResultToProto(&block[i], &ls[i].Result)
		out.Limits[i] = &weirv1.KeyLimit{Rule: ls[i].Rule, Result: &block[i]}
	}
	return out, nil
}
