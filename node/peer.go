package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/grpcwin"
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
// would, in order, and answers it with the request's id (checkstream.Serve).
func (s *peerServer) ForwardStream(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	return checkstream.Serve(stream, s.forward)
}

// forward is the body of Forward and ForwardStream: one result per item,
// in order, or a gRPC status error for the request as a whole. The peer
// server is a wire edge like the APIs: it converts the items, validates
// each once (a node does not trust the wire) and converts the results.
func (s *peerServer) forward(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	b := s.batches.FromProto(items)
	defer s.batches.Put(b)
	err := limit.DecideValid(b.Items, b.Results, func(valid []limit.Item, out []limit.Result) error {
		return s.n.check(ctx, valid, out, true)
	})
	if err != nil {
		return nil, grpcErr(err)
	}
	return limitpb.ResultsToProto(b.Results), nil
}

// Replicate stores counter copies shipped by an owner.
func (s *peerServer) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	s.n.replicas.Apply(req.From, statesFromProto(req.States))
	return &weirv1.ReplicateResponse{}, nil
}

// ReplicateStream applies each request as Replicate does, in order.
func (s *peerServer) ReplicateStream(stream grpc.BidiStreamingServer[weirv1.ReplicateRequest, weirv1.ReplicateResponse]) error {
	ack := &weirv1.ReplicateResponse{}
	return checkstream.Each(stream, func(req *weirv1.ReplicateRequest) *weirv1.ReplicateResponse {
		s.n.replicas.Apply(req.From, statesFromProto(req.States))
		return ack
	})
}

// Handoff gives the caller the partitions it now owns. For each partition
// this node holds, it passes the counters on (later items are forwarded to
// the caller) and drops them. For a partition it handed on earlier it says
// to whom, so the caller follows the counters there. Replica copies of the
// asked partitions go along, for when no live node holds one.
func (s *peerServer) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	n := s.n
	if req.To == "" || req.To == n.cfg.ID {
		return nil, status.Error(codes.InvalidArgument, "handoff: bad requester")
	}
	for _, p := range req.Partitions {
		if int(p) >= len(n.parts.slots) {
			return nil, status.Errorf(codes.InvalidArgument, "handoff: partition %d out of range", p)
		}
	}
	resp := &weirv1.HandoffResponse{}
	for _, p := range req.Partitions {
		// This node may itself still be pulling p (two ring changes close
		// together): hand it on only once it has arrived, so the caller
		// gets the counters and not an empty partition.
		select {
		case <-n.parts.readyChan(p):
		case <-ctx.Done():
			return nil, grpcErr(ctx.Err())
		}
		held, to := n.parts.handOff(p, req.To)
		switch {
		case held:
			resp.Held = append(resp.Held, p)
		case to != "":
			resp.Moved = append(resp.Moved, &weirv1.Moved{Partition: p, To: to})
		}
	}
	if len(resp.Held) > 0 {
		st, err := n.exportHeld(ctx, resp.Held)
		if err != nil {
			// The caller installs nothing: hold the partitions again.
			v := n.view.Load()
			for _, p := range resp.Held {
				n.parts.handBack(p, req.To, v != nil && v.ring.PartitionOwner(p) == n.cfg.ID)
			}
			return nil, grpcErr(err)
		}
		resp.States = statesToProto(st)
	}
	resp.Copies = statesToProto(n.replicas.Peek(req.Partitions))
	n.met.handedOff.Add(float64(len(resp.Held)))
	n.log.Info("handed off partitions", "to", req.To, "partitions", len(resp.Held), "states", len(resp.States), "moved", len(resp.Moved))
	return resp, nil
}

// exportHeld exports and drops the counters of partitions just handed
// off, once the checks that saw them here are done.
func (n *Node) exportHeld(ctx context.Context, parts []uint32) ([]replication.State, error) {
	for _, p := range parts {
		if err := n.parts.waitUnpinned(ctx, p); err != nil {
			return nil, err
		}
	}
	st, err := n.engine.Export(ctx, parts)
	if err != nil {
		return nil, err
	}
	return st, n.engine.Drop(ctx, parts)
}

// pullPartitions fetches the state of partitions this node gained, from
// wherever their counters are, then marks them ready.
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
		states, orphans := n.fetch(src, parts)
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		if err := n.install(ctx, parts, states); err != nil {
			n.log.Warn("install pulled partitions", "err", err)
		}
		cancel()
		got := slices.DeleteFunc(slices.Clone(parts), func(p uint32) bool { return slices.Contains(orphans, p) })
		n.replicas.Drop(got)
		n.markReady(got)
		local = append(local, orphans...)
	}
	if len(local) > 0 {
		// Promote this node's replica copies (no live node holds them).
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

// maxHandoffAsks bounds the nodes asked for one partition's counters, and
// handoffAskTimeout one ask (an unreachable node is not declared dead
// before about 2 s; a holder still pulling answers once it has arrived).
const (
	maxHandoffAsks    = 8
	handoffAskTimeout = 3 * time.Second
)

// fetch collects the counters of parts, asking src first. The node that
// holds a partition hands it over; a node that handed it on names the next
// holder, which is asked in turn (the chain a run of ring changes leaves
// when this node's view skipped one of them). A partition nobody named is
// asked of every other live member. For a partition no live node holds,
// fetch returns the freshest replica copies it saw, plus the partition in
// orphans when it saw none (the caller promotes its own copies, if any).
func (n *Node) fetch(src string, parts []uint32) (states []replication.State, orphans []uint32) {
	asked := map[uint32][]string{}
	held := map[uint32]bool{}
	var copies []replication.State
	ask := map[string][]uint32{src: parts}
	var unnamed []uint32 // asked, and nobody has said where they are
	broadcast := false
	for len(ask) > 0 {
		next := map[string][]uint32{}
		for dest, ps := range ask {
			for _, p := range ps {
				asked[p] = append(asked[p], dest)
			}
			resp, err := n.handoffFrom(dest, ps)
			if err != nil {
				n.log.Warn("hand-off request failed", "from", dest, "partitions", len(ps), "err", err)
				unnamed = append(unnamed, ps...)
				continue
			}
			for _, p := range resp.Held {
				held[p] = true
			}
			states = append(states, statesFromProto(resp.States)...)
			copies = append(copies, statesFromProto(resp.Copies)...)
			named := map[uint32]bool{}
			for _, m := range resp.Moved {
				if m.To != n.cfg.ID && !slices.Contains(asked[m.Partition], m.To) && len(asked[m.Partition]) < maxHandoffAsks {
					next[m.To] = append(next[m.To], m.Partition)
					named[m.Partition] = true
				}
			}
			for _, p := range ps {
				if !held[p] && !named[p] {
					unnamed = append(unnamed, p)
				}
			}
		}
		if len(next) == 0 && len(unnamed) > 0 && !broadcast {
			// Nobody said where these went: ask everyone not asked yet.
			broadcast = true
			for id := range n.readMembers() {
				if id == n.cfg.ID {
					continue
				}
				for _, p := range unnamed {
					if !held[p] && !slices.Contains(asked[p], id) {
						next[id] = append(next[id], p)
					}
				}
			}
		}
		ask = next
	}
	// Replica copies count only where no holder answered.
	copied := map[uint32]bool{}
	for _, st := range copies {
		if !held[st.Partition] {
			states = append(states, st)
			copied[st.Partition] = true
		}
	}
	for _, p := range parts {
		if !held[p] && !copied[p] {
			orphans = append(orphans, p)
		}
	}
	return states, orphans
}

func (n *Node) handoffFrom(src string, parts []uint32) (*weirv1.HandoffResponse, error) {
	cl, err := n.peerClient(src)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(n.ctx, handoffAskTimeout)
	defer cancel()
	return cl.Handoff(ctx, &weirv1.HandoffRequest{To: n.cfg.ID, Partitions: parts})
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

// peerTransport ships replication batches to each peer as messages on a
// long-lived Peer.ReplicateStream: a unary RPC per batch cost so much that
// replication took more of a node's CPU than deciding checks (steady ran
// 40-55% faster with a 50 ms interval than with 5 ms before the stream).
// The replicator keeps one send in flight per peer, so each peer's stream
// has one user at a time. A peer that lacks the stream (an older node) gets
// unary Replicate RPCs for a while.
type peerTransport struct {
	n       *Node
	mu      sync.Mutex
	streams map[string]*replStream // by peer id
}

type replStream struct {
	pipe   checkstream.Pipe[weirv1.ReplicateRequest, weirv1.ReplicateResponse]
	legacy checkstream.Legacy
}

func newPeerTransport(n *Node) *peerTransport {
	return &peerTransport{n: n, streams: map[string]*replStream{}}
}

// replicateTimeout bounds a replication request whose ctx has no deadline.
const replicateTimeout = 5 * time.Second

func (t *peerTransport) Replicate(ctx context.Context, to, from string, states []replication.State) error {
	conn, err := t.n.peerConn(to)
	if err != nil {
		return err
	}
	t.mu.Lock()
	rs := t.streams[to]
	if rs == nil {
		rs = &replStream{}
		rs.pipe.Name = "peer " + to
		t.streams[to] = rs
	}
	t.mu.Unlock()
	req := &weirv1.ReplicateRequest{From: from, States: statesToProto(states)}
	if rs.legacy.Active() {
		_, err := weirv1.NewPeerClient(conn).Replicate(ctx, req)
		return err
	}
	timeout := replicateTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	_, err = rs.pipe.RoundTrip(t.n.ctx, conn, weirv1.NewPeerClient(conn).ReplicateStream, req, timeout)
	if rs.legacy.Saw(err) {
		_, err = weirv1.NewPeerClient(conn).Replicate(ctx, req)
	}
	return err
}

// close ends every replication stream.
func (t *peerTransport) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rs := range t.streams {
		rs.pipe.Close()
	}
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

// grpcErr is api.GRPCError: the one mapping of errors to gRPC codes.
func grpcErr(err error) error { return api.GRPCError(err) }

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
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second})}, grpcwin.DialOptions()...)
	if cfg.PeerDialer != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.PeerDialer))
	}
	return opts
}
