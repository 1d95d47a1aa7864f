package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/grpcwin"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	"github.com/weirlimit/weir/node/api"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/replication"
)

// peerServer is node-to-node gRPC traffic.
type peerServer struct {
	weirv1.UnimplementedPeerServer
	n       *Node
	batches limitpb.BatchPool // forwarded items and results, recycled (check keeps neither)
}

// Forward decides items a peer believes this node owns.
func (s *peerServer) Forward(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	res, err := s.forward(ctx, req.GetItems())
	if err != nil {
		return nil, err
	}
	return &weirv1.CheckResponse{Results: res}, nil
}

// ForwardStream decides each request of the stream exactly as Forward
// would and answers it with the request's id. The sender pipelines its
// requests (forward.go), so a request whose decision may wait (mayWait: a
// rule version not applied yet, partitions waiting for their counters) is
// decided aside (checkstream.ServeAside), not holding up the requests
// behind it; every other request is decided on the stream's goroutine, in
// order, its answer in one reused set of result messages
// (limitpb.ResultBuf).
func (s *peerServer) ForwardStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	var buf limitpb.ResultBuf
	return checkstream.ServeAside(stream, func(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
		return s.forwardInto(ctx, items, &buf)
	}, s.n.mayWait, s.forward)
}

// mayWait reports whether deciding items may wait: an item asks for a
// rule version this node has not applied, or partitions wait for their
// counters (replication.Routes.Pending).
func (n *Node) mayWait(items []*weirv1.CheckItem) bool {
	if n.handoff.Routes().Pending() > 0 {
		return true
	}
	v := n.rules().version
	for _, it := range items {
		if it.GetRuleVersion() > v {
			return true
		}
	}
	return false
}

// forward is the body of Forward and ForwardStream: one result per item,
// in order, or a gRPC status error for the request as a whole. The peer
// server is a wire edge like the APIs: it converts the items, validates
// each once (a node does not trust the wire) and converts the results.
func (s *peerServer) forward(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	return s.forwardInto(ctx, items, nil)
}

// forwardInto is forward with the results converted into buf's messages
// (nil: fresh ones).
func (s *peerServer) forwardInto(ctx context.Context, items []*weirv1.CheckItem, buf *limitpb.ResultBuf) ([]*weirv1.CheckResult, error) {
	if err := s.n.callerAdmitted(ctx); err != nil {
		return nil, err
	}
	b := s.batches.FromProto(items)
	defer s.batches.Put(b)
	if s.n.tracer != nil && tracing.Traced(b.Items) {
		var span trace.Span
		ctx, span = tracing.Start(ctx, s.n.tracer, "weir.decide", trace.SpanKindServer, tracing.Traces(b.Items))
		defer span.End()
	}
	err := limit.DecideValid(b.Items, b.Results, func(valid []limit.Item, out []limit.Result) error {
		return s.n.check(ctx, valid, out, true)
	})
	if err != nil {
		return nil, grpcErr(err)
	}
	if buf != nil {
		return buf.ToProto(b.Results), nil
	}
	return limitpb.ResultsToProto(b.Results), nil
}

// Replicate stores counter copies shipped by an owner.
func (s *peerServer) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	if err := s.n.callerIs(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	if err := s.n.ids.Member(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	if err := s.n.replicas.Apply(req.From, s.n.statesOnOurClock(req.States, req.GetSentAtNs())); err != nil {
		return nil, grpcErr(limit.Errorf(limit.ErrInvalid, "%w", err))
	}
	return &weirv1.ReplicateResponse{}, nil
}

// ReplicateStream applies each request as Replicate does, in order, and
// answers only those that ask (ReplicateRequest.ack), with the sequence
// number of the last one applied; a sender that predates seq gets an
// answer to every request.
func (s *peerServer) ReplicateStream(stream grpc.BidiStreamingServer[weirv1.ReplicateRequest, weirv1.ReplicateResponse]) error {
	ack := &weirv1.ReplicateResponse{}
	caller, err := s.n.caller(stream.Context()) // the proof is checked once, when the stream opens
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
func (s *peerServer) applyStreamed(ctx context.Context, caller string, req *weirv1.ReplicateRequest) {
	if len(req.GetStates()) == 0 {
		return
	}
	if err := s.n.speaksFor(caller, req.GetFrom()); err != nil {
		s.n.log.Warn("replica states refused", "from", req.GetFrom(), "err", err)
		return
	}
	if err := s.n.ids.Member(ctx, caller); err != nil {
		s.n.log.Warn("replica states refused", "from", req.GetFrom(), "err", err)
		return
	}
	if err := s.n.replicas.Apply(req.From, s.n.statesOnOurClock(req.States, req.GetSentAtNs())); err != nil {
		s.n.log.Warn("replica states refused", "from", req.From, "err", err)
	}
}

// Handoff gives the caller the partitions it now owns (the holder's side
// of the hand-off protocol, replication.Handoff.Serve).
func (s *peerServer) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	if err := s.n.callerIs(ctx, req.GetTo()); err != nil {
		return nil, err
	}
	if err := s.n.ids.Ask(ctx, req.GetTo(), req.GetPartitions()); err != nil {
		return nil, err
	}
	r, err := s.n.handoff.Serve(ctx, replication.HandoffRequest{To: req.GetTo(), Parts: req.GetPartitions()})
	switch {
	case errors.Is(err, replication.ErrBadRequest):
		return nil, grpcErr(limit.Errorf(limit.ErrInvalid, "%w", err))
	case errors.Is(err, replication.ErrClosed):
		return nil, grpcErr(limit.Errorf(limit.ErrClosed, "%w", err))
	case err != nil:
		return nil, grpcErr(err)
	}
	resp := &weirv1.HandoffResponse{Held: r.Held, States: statesToProto(r.States), Copies: statesToProto(r.Copies), SentAtNs: s.n.now()}
	for _, m := range r.Moved {
		resp.Moved = append(resp.Moved, &weirv1.Moved{Partition: m.Partition, To: m.To})
	}
	return resp, nil
}

// peerHandoff is the puller's side of the hand-off on the wire.
type peerHandoff struct {
	pool *peerPool
	now  func() int64 // this node's clock (Config.Now)
}

var _ replication.Peers = peerHandoff{}

func (p peerHandoff) Handoff(ctx context.Context, addr string, req replication.HandoffRequest) (replication.HandoffReply, error) {
	cc, err := p.pool.conn(addr)
	if err != nil {
		return replication.HandoffReply{}, err
	}
	// Wait for the connection within the ask's deadline rather than fail
	// at once while it redials: right after a split heals, the one ask
	// that takes the other side's counters would otherwise fail on a
	// connection still in backoff, and this node would keep its own.
	resp, err := weirv1.NewPeerClient(cc).Handoff(ctx, &weirv1.HandoffRequest{To: req.To, Partitions: req.Parts}, grpc.WaitForReady(true))
	if err != nil {
		return replication.HandoffReply{}, err
	}
	now := p.now()
	out := replication.HandoffReply{Held: resp.Held, States: statesFromProto(resp.States), Copies: statesFromProto(resp.Copies)}
	onOurClock(out.States, resp.GetSentAtNs(), now)
	onOurClock(out.Copies, resp.GetSentAtNs(), now)
	for _, m := range resp.Moved {
		if m != nil {
			out.Moved = append(out.Moved, replication.Moved{Partition: m.Partition, To: m.To})
		}
	}
	return out, nil
}

// replicaPlacement lists where a partition's copies go (not this node).
func (n *Node) replicaPlacement(p uint32) []string {
	v := n.cluster.View()
	if v == nil {
		return nil
	}
	if int(p) >= len(v.Peers) {
		return nil
	}
	return v.Peers[p] // shared: the replicator only reads it
}

// peerTransport ships replication batches to each peer on one long-lived,
// pipelined Peer.ReplicateStream (replication.Streams): the replicator
// writes each batch at once, without waiting for the last, and asks for a
// cumulative acknowledgement now and then, so neither side is woken per
// batch. A unary RPC per batch cost so much that replication took more of
// a node's CPU than deciding checks (steady ran 40-55% faster with a 50 ms
// interval than with 5 ms before the stream). A peer that lacks the stream
// (an older node) gets unary Replicate RPCs for a while.
type peerTransport struct {
	n      *Node
	mu     sync.Mutex
	legacy map[string]*checkstream.Legacy // by peer id
}

var _ replication.Streams = (*peerTransport)(nil)

func newPeerTransport(n *Node) *peerTransport {
	return &peerTransport{n: n, legacy: map[string]*checkstream.Legacy{}}
}

// replicateTimeout bounds opening a replication stream, a write to one
// that waits on the peer, and a request whose ctx has no deadline.
const replicateTimeout = 5 * time.Second

func (t *peerTransport) legacyOf(to string) *checkstream.Legacy {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.legacy[to]
	if l == nil {
		l = &checkstream.Legacy{}
		t.legacy[to] = l
	}
	return l
}

// Replicate ships states in one unary RPC (to a peer without the stream).
func (t *peerTransport) Replicate(ctx context.Context, to, from string, states []replication.State) error {
	conn, err := t.n.peerConn(to)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, replicateTimeout)
		defer cancel()
	}
	_, err = weirv1.NewPeerClient(conn).Replicate(ctx, &weirv1.ReplicateRequest{From: from, States: statesToProto(states), SentAtNs: t.n.now()})
	return err
}

// OpenStream opens a replication stream to peer to, bound to ctx.
func (t *peerTransport) OpenStream(ctx context.Context, to string) (replication.Stream, error) {
	legacy := t.legacyOf(to)
	if legacy.Active() {
		return nil, fmt.Errorf("peer %s: %w", to, replication.ErrNoStream)
	}
	conn, err := t.n.peerConn(to)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	opening := time.AfterFunc(replicateTimeout, cancel)
	st, err := weirv1.NewPeerClient(conn).ReplicateStream(sctx)
	if !opening.Stop() || err != nil {
		cancel()
		if err == nil {
			err = fmt.Errorf("peer %s: replication stream not open within %v: %w", to, replicateTimeout, context.DeadlineExceeded)
		}
		return nil, err
	}
	return &replStream{t: t, st: st, cancel: cancel, legacy: legacy}, nil
}

// replStream is one replication stream (replication.Stream).
type replStream struct {
	t      *peerTransport
	st     grpc.BidiStreamingClient[weirv1.ReplicateRequest, weirv1.ReplicateResponse]
	cancel context.CancelFunc
	legacy *checkstream.Legacy
	req    weirv1.ReplicateRequest // reused: Send has encoded it when it returns
	n      uint64                  // last request acknowledged
}

// Send writes b. The replicator keeps little unacknowledged on the
// stream, so the write is only queued; should the peer stop reading with
// grpc-go's buffers full, the stream is dropped after replicateTimeout
// rather than hold the replicator up.
func (s *replStream) Send(b replication.Batch) error {
	s.req.From, s.req.States, s.req.SentAtNs, s.req.Seq, s.req.Ack = b.From, statesToProto(b.States), s.t.n.now(), b.Seq, b.Ack
	stuck := time.AfterFunc(replicateTimeout, s.cancel)
	err := s.st.Send(&s.req)
	stuck.Stop()
	s.req.States = nil
	return err
}

// Recv waits for the next acknowledgement. A peer that predates seq
// answers every request in order with acked 0: its n-th answer
// acknowledges request n.
func (s *replStream) Recv() (uint64, error) {
	resp, err := s.st.Recv()
	if err != nil {
		if s.legacy.Saw(err) {
			err = fmt.Errorf("%w: %w", replication.ErrNoStream, err)
		}
		return 0, err
	}
	s.n++
	if a := resp.GetAcked(); a != 0 {
		s.n = a
	}
	return s.n, nil
}

func (s *replStream) Close() { s.cancel() }

func statesToProto(in []replication.State) []*weirv1.CounterState {
	block := make([]weirv1.CounterState, len(in)) // one allocation, not one per state
	out := make([]*weirv1.CounterState, len(in))
	for i, s := range in {
		c := &block[i]
		c.Id, c.Partition, c.A, c.B, c.C, c.Log, c.Permits = s.ID, s.Partition, s.A, s.B, s.C, s.Log, s.Permits
		c.IdleNs, c.Volatile = s.Idle, s.Volatile
		out[i] = c
	}
	return out
}

func statesFromProto(in []*weirv1.CounterState) []replication.State {
	out := make([]replication.State, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		out = append(out, replication.State{ID: s.Id, Partition: s.Partition, A: s.A, B: s.B, C: s.C, Log: s.Log, Permits: s.Permits,
			Idle: max(s.IdleNs, 0), Volatile: s.Volatile})
	}
	return out
}

// grpcErr is api.GRPCError: the one mapping of errors to gRPC codes.
func grpcErr(err error) error { return api.GRPCError(err) }

// peerDialOptions are the options of every peer connection besides its
// credentials. Reconnects back off to at most one second (gRPC's default
// is two minutes), so a peer that comes back after a network split or a
// restart is reachable again as soon as gossip says it is alive.
func peerDialOptions(cfg Config) []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = time.Second
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second})}, grpcwin.DialOptions()...)
	if cfg.PeerDialer != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.PeerDialer))
	}
	return opts
}
