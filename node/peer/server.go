package peer

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	"github.com/weirlimit/weir/node/api"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/replication"
)

// Checker decides the items a peer forwarded to this node (the node's
// check with forwarded set): one result per item into res.
type Checker interface {
	CheckForwarded(ctx context.Context, items []limit.Item, res []limit.Result) error
}

// Guard says who calls: a member admitted to the cluster, the member a
// request names, the caller's proven id and whether it may speak for a
// member (the security part's checks, a gRPC status error on refusal).
type Guard interface {
	CallerAdmitted(ctx context.Context) error
	CallerIs(ctx context.Context, id string) error
	Caller(ctx context.Context) (string, error)
	SpeaksFor(caller, from string) error
}

// Identity binds node credentials to membership (node/identity.Guard): id
// is a member, and asker may ask for parts.
type Identity interface {
	Member(ctx context.Context, id string) error
	Ask(ctx context.Context, asker string, parts []uint32) error
}

// Replicas stores the counter copies owners ship (replication.Store).
type Replicas interface {
	Apply(from string, states []replication.State) error
}

// Holder is the holder's side of the hand-off (replication.Handoff): it
// serves a new owner's pull and publishes the routes (Routes.Pending:
// partitions waiting for their counters).
type Holder interface {
	Serve(ctx context.Context, req replication.HandoffRequest) (replication.HandoffReply, error)
	Routes() *replication.Routes
}

// Config is what the Peer server needs.
type Config struct {
	Checker     Checker
	Guard       Guard
	Identity    Identity
	Replicas    Replicas
	Handoff     Holder
	RuleVersion func() uint64 // the rule set version applied here
	Now         func() int64  // this node's clock (unix ns)
	Tracer      trace.Tracer  // nil: tracing off
	Logger      *slog.Logger
}

// Server is the Peer gRPC service: node-to-node traffic. It is a wire
// edge like the APIs: it converts the items, validates each once (a node
// does not trust the wire) and converts the results.
type Server struct {
	weirv1.UnimplementedPeerServer
	cfg     Config
	batches limitpb.BatchPool // forwarded items and results, recycled (the checker keeps neither)
}

// NewServer returns the Peer service over cfg's parts.
func NewServer(cfg Config) *Server { return &Server{cfg: cfg} }

// Forward decides items a peer believes this node owns.
func (s *Server) Forward(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	res, err := s.forward(ctx, req.GetItems())
	if err != nil {
		return nil, err
	}
	return &weirv1.CheckResponse{Results: res}, nil
}

// ForwardStream decides each request of the stream exactly as Forward
// would and answers it with the request's id. The sender pipelines its
// requests (node/forward), so a request whose decision may wait (mayWait:
// a rule version not applied yet, partitions waiting for their counters)
// is decided aside (checkstream.ServeAside), not holding up the requests
// behind it; every other request is decided on the stream's goroutine, in
// order, its answer in one reused set of result messages
// (limitpb.ResultBuf).
func (s *Server) ForwardStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	var buf limitpb.ResultBuf
	return checkstream.ServeAside(stream, func(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
		return s.forwardInto(ctx, items, &buf)
	}, s.mayWait, s.forward)
}

// mayWait reports whether deciding items may wait: an item asks for a
// rule version this node has not applied, or partitions wait for their
// counters (replication.Routes.Pending).
func (s *Server) mayWait(items []*weirv1.CheckItem) bool {
	if s.cfg.Handoff.Routes().Pending() > 0 {
		return true
	}
	v := s.cfg.RuleVersion()
	for _, it := range items {
		if it.GetRuleVersion() > v {
			return true
		}
	}
	return false
}

// forward is the body of Forward and ForwardStream: one result per item,
// in order, or a gRPC status error for the request as a whole.
func (s *Server) forward(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	return s.forwardInto(ctx, items, nil)
}

// forwardInto is forward with the results converted into buf's messages
// (nil: fresh ones).
func (s *Server) forwardInto(ctx context.Context, items []*weirv1.CheckItem, buf *limitpb.ResultBuf) ([]*weirv1.CheckResult, error) {
	if err := s.cfg.Guard.CallerAdmitted(ctx); err != nil {
		return nil, err
	}
	b := s.batches.FromProto(items)
	defer s.batches.Put(b)
	if s.cfg.Tracer != nil && tracing.Traced(b.Items) {
		var span trace.Span
		ctx, span = tracing.Start(ctx, s.cfg.Tracer, "weir.decide", trace.SpanKindServer, tracing.Traces(b.Items))
		defer span.End()
	}
	err := limit.DecideValid(b.Items, b.Results, func(valid []limit.Item, out []limit.Result) error {
		return s.cfg.Checker.CheckForwarded(ctx, valid, out)
	})
	if err != nil {
		return nil, api.GRPCError(err)
	}
	if buf != nil {
		return buf.ToProto(b.Results), nil
	}
	return limitpb.ResultsToProto(b.Results), nil
}

// Replicate stores counter copies shipped by an owner.
func (s *Server) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	if err := s.cfg.Guard.CallerIs(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	if err := s.cfg.Identity.Member(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	if err := s.cfg.Replicas.Apply(req.From, s.statesOnOurClock(req.States, req.GetSentAtNs())); err != nil {
		return nil, api.GRPCError(limit.Errorf(limit.ErrInvalid, "%w", err))
	}
	return &weirv1.ReplicateResponse{}, nil
}

// ReplicateStream applies each request as Replicate does, in order, and
// answers only those that ask (ReplicateRequest.ack), with the sequence
// number of the last one applied; a sender that predates seq gets an
// answer to every request.
func (s *Server) ReplicateStream(stream grpc.BidiStreamingServer[weirv1.ReplicateRequest, weirv1.ReplicateResponse]) error {
	ack := &weirv1.ReplicateResponse{}
	caller, err := s.cfg.Guard.Caller(stream.Context()) // the proof is checked once, when the stream opens
	if err != nil {
		return err
	}
	return checkstream.Each(stream, func(req *weirv1.ReplicateRequest) *weirv1.ReplicateResponse {
		s.applyStreamed(stream.Context(), caller, req)
		if seq := req.GetSeq(); seq == 0 || req.GetAck() {
			ack.Acked = seq
			return ack
		}
		return nil
	})
}

// applyStreamed stores one streamed request's states. A refusal is only
// logged and the stream goes on: the replica then lacks those copies
// until their counters change again.
func (s *Server) applyStreamed(ctx context.Context, caller string, req *weirv1.ReplicateRequest) {
	if len(req.GetStates()) == 0 {
		return
	}
	err := s.cfg.Guard.SpeaksFor(caller, req.GetFrom())
	if err == nil {
		err = s.cfg.Identity.Member(ctx, caller)
	}
	if err == nil {
		err = s.cfg.Replicas.Apply(req.From, s.statesOnOurClock(req.States, req.GetSentAtNs()))
	}
	if err != nil {
		s.cfg.Logger.Warn("replica states refused", "from", req.GetFrom(), "err", err)
	}
}

// Handoff gives the caller the partitions it now owns (the holder's side
// of the hand-off protocol, replication.Handoff.Serve).
func (s *Server) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	if err := s.cfg.Guard.CallerIs(ctx, req.GetTo()); err != nil {
		return nil, err
	}
	if err := s.cfg.Identity.Ask(ctx, req.GetTo(), req.GetPartitions()); err != nil {
		return nil, err
	}
	r, err := s.cfg.Handoff.Serve(ctx, replication.HandoffRequest{To: req.GetTo(), Parts: req.GetPartitions()})
	switch {
	case errors.Is(err, replication.ErrBadRequest):
		return nil, api.GRPCError(limit.Errorf(limit.ErrInvalid, "%w", err))
	case errors.Is(err, replication.ErrClosed):
		return nil, api.GRPCError(limit.Errorf(limit.ErrClosed, "%w", err))
	case err != nil:
		return nil, api.GRPCError(err)
	}
	resp := &weirv1.HandoffResponse{Held: r.Held, States: statesToProto(r.States), Copies: statesToProto(r.Copies), SentAtNs: s.cfg.Now()}
	for _, m := range r.Moved {
		resp.Moved = append(resp.Moved, &weirv1.Moved{Partition: m.Partition, To: m.To})
	}
	return resp, nil
}

// statesOnOurClock is statesFromProto, then onOurClock.
func (s *Server) statesOnOurClock(in []*weirv1.CounterState, sentAt int64) []replication.State {
	states := statesFromProto(in)
	onOurClock(states, sentAt, s.cfg.Now())
	return states
}
