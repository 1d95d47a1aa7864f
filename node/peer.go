package node

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/checkstream"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/replication"
)

// peerServer is node-to-node gRPC traffic.
type peerServer struct {
	weirv1.UnimplementedPeerServer
	n *Node
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
// would, in order, and answers it with the request's id (checkstream.Serve).
func (s *peerServer) ForwardStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	return checkstream.Serve(stream, s.forward)
}

// forward is the body of Forward and ForwardStream: one result per item,
// in order, or a gRPC status error for the request as a whole.
func (s *peerServer) forward(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	res, err := s.n.check(ctx, items, true)
	if err != nil {
		return nil, grpcErr(err)
	}
	return res, nil
}

// Replicate stores counter copies shipped by an owner.
func (s *peerServer) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	s.n.replicas.Apply(req.From, statesFromProto(req.States))
	return &weirv1.ReplicateResponse{}, nil
}

// Handoff gives the caller the partitions it now owns: partitions this node
// serves are marked moved (later items are forwarded to the caller), exported
// and dropped; partitions held as replica copies are copied.
func (s *peerServer) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	n := s.n
	if req.To == "" || req.To == n.cfg.ID {
		return nil, status.Error(codes.InvalidArgument, "handoff: bad requester")
	}
	var owned []uint32
	for _, p := range req.Partitions {
		if int(p) >= len(n.parts.slots) {
			return nil, status.Errorf(codes.InvalidArgument, "handoff: partition %d out of range", p)
		}
	}
	for _, p := range req.Partitions {
		// This node may itself still be pulling p (two ring changes close
		// together): hand it on only once it has arrived, so the caller
		// gets the counters and not an empty partition.
		select {
		case <-n.parts.readyChan(p):
		case <-ctx.Done():
			return nil, grpcErr(ctx.Err())
		}
		if n.parts.setMoved(p, req.To) {
			owned = append(owned, p)
		}
	}
	// Counters this node decided (as owner, or for a peer that forwarded
	// to it) plus any replica copies it holds.
	var states []replication.State
	if len(owned) > 0 {
		st, err := n.engine.Export(ctx, owned)
		if err != nil {
			return nil, grpcErr(err)
		}
		states = append(states, st...)
		if err := n.engine.Drop(ctx, owned); err != nil {
			return nil, grpcErr(err)
		}
	}
	states = append(states, n.replicas.Peek(req.Partitions)...)
	n.met.handedOff.Add(float64(len(owned)))
	n.log.Info("handed off partitions", "to", req.To, "partitions", len(owned), "states", len(states))
	return &weirv1.HandoffResponse{States: statesToProto(states)}, nil
}

// pullPartitions fetches the state of partitions this node gained, from
// their previous holders in order, then marks them ready.
func (n *Node) pullPartitions(gain []replication.Source) {
	bySource := map[string][]uint32{}
	var local []uint32
	for _, g := range gain {
		src := n.source(g.From)
		if src == "" {
			local = append(local, g.Partition)
			continue
		}
		bySource[src] = append(bySource[src], g.Partition)
	}
	for src, parts := range bySource {
		if err := n.pullFrom(src, parts); err != nil {
			n.log.Warn("hand-off failed; promoting replica copies", "from", src, "partitions", len(parts), "err", err)
			local = append(local, parts...)
			continue
		}
		n.replicas.Drop(parts)
		n.markReady(parts)
	}
	if len(local) > 0 {
		// Promote this node's replica copies (the owner is gone).
		states := n.replicas.Take(local)
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		if err := n.install(ctx, local, states); err != nil {
			n.log.Warn("promote replica copies", "err", err)
		}
		cancel()
		n.met.promoted.Add(float64(len(states)))
		n.markReady(local)
	}
}

func (n *Node) pullFrom(src string, parts []uint32) error {
	cl, err := n.peerClient(src)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	resp, err := cl.Handoff(ctx, &weirv1.HandoffRequest{To: n.cfg.ID, Partitions: parts})
	if err != nil {
		return err
	}
	return n.install(ctx, parts, statesFromProto(resp.States))
}

// install makes states the counters of parts. Whatever the engine still
// holds for them is from an earlier time this node served them, and older
// than what the previous holder sent: it is dropped first.
func (n *Node) install(ctx context.Context, parts []uint32, states []replication.State) error {
	if err := n.engine.Drop(ctx, parts); err != nil {
		return err
	}
	return n.engine.Import(ctx, states)
}

// resyncReplicas sends the full state of partitions this node still owns
// to their replicas after the ring gave them a new one (which would
// otherwise get only the counters that change from now on). One partition
// at a time goes through the replicator, ordered with the change stream;
// a partition that moved on meanwhile is skipped.
func (n *Node) resyncReplicas(parts []uint32) {
	total := 0
	for _, p := range parts {
		for attempt := 0; ; attempt++ {
			if v := n.view.Load(); v == nil || v.ring.PartitionOwner(p) != n.cfg.ID || n.parts.state(p) != partReady {
				break
			}
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			k, err := n.repl.Resync(ctx, func(ctx context.Context) ([]replication.State, error) {
				return n.engine.Export(ctx, []uint32{p})
			})
			cancel()
			if errors.Is(err, replication.ErrQueueFull) && attempt < 100 {
				t := time.NewTimer(n.cfg.ReplicationInterval)
				select {
				case <-n.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			if err != nil {
				if n.ctx.Err() == nil {
					n.log.Warn("replica resync failed", "partition", p, "err", err)
				}
				break
			}
			total += k
			break
		}
	}
	n.resynced.Add(float64(total))
	n.log.Info("resynced new replicas", "partitions", len(parts), "states", total)
}

// replicaPlacement lists where a partition's copies go (not this node).
func (n *Node) replicaPlacement(p uint32) []string {
	v := n.view.Load()
	if v == nil {
		return nil
	}
	reps := v.ring.PartitionReplicas(p)
	out := make([]string, 0, len(reps))
	for _, id := range reps {
		if id != n.cfg.ID {
			out = append(out, id)
		}
	}
	return out
}

// peerTransport ships replication batches over gRPC.
type peerTransport struct{ n *Node }

func (t peerTransport) Replicate(ctx context.Context, to, from string, states []replication.State) error {
	cl, err := t.n.peerClient(to)
	if err != nil {
		return err
	}
	_, err = cl.Replicate(ctx, &weirv1.ReplicateRequest{From: from, States: statesToProto(states)})
	return err
}

func statesToProto(in []replication.State) []*weirv1.CounterState {
	out := make([]*weirv1.CounterState, len(in))
	for i, s := range in {
		out[i] = &weirv1.CounterState{Id: s.ID, Partition: s.Partition, A: s.A, B: s.B, C: s.C, Log: s.Log}
	}
	return out
}

func statesFromProto(in []*weirv1.CounterState) []replication.State {
	out := make([]replication.State, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		out = append(out, replication.State{ID: s.Id, Partition: s.Partition, A: s.A, B: s.B, C: s.C, Log: s.Log})
	}
	return out
}

// grpcErr maps node errors to gRPC status codes (the only place that does).
func grpcErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrClosed), errors.Is(err, errUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// markReady settles pulled partitions: ready, unless a newer ring gave them
// to another node meanwhile (then this node holds them for that node).
func (n *Node) markReady(parts []uint32) {
	v := n.view.Load()
	for _, p := range parts {
		n.parts.arrived(p, v == nil || v.ring.PartitionOwner(p) == n.cfg.ID)
	}
}

// peerDialOptions are the options of every peer connection besides its
// credentials. Reconnects back off to at most one second (gRPC's default
// is two minutes), so a peer that comes back after a network split or a
// restart is reachable again as soon as gossip says it is alive.
func peerDialOptions(cfg Config) []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = time.Second
	opts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second})}
	if cfg.PeerDialer != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.PeerDialer))
	}
	return opts
}
