package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// Node is one node's parts. Its methods are the driver's (see Cluster).
type Node struct {
	ID string
	c  *Cluster // nil in a World

	now  func() time.Time
	logf func(format string, args ...any)

	book     *clusterview.Book
	policy   *clusterview.Policy
	engine   *shard.Engine
	repl     *replication.Replicator
	replicas *replication.Store
	handoff  *replication.Handoff
	// view is the ring and members published last (the replicator's
	// placement reads it).
	view atomic.Pointer[view]

	leaving bool
	joining bool // a join is configured and has not succeeded yet
	gone    bool // left (or the cluster closed): its parts are closed
}

// view is a published ring, the router's replication.View.
type view struct {
	ring    *ring.Ring
	members map[string]clusterview.Member
}

var _ replication.View = (*view)(nil)

func (v *view) PartitionOwner(p uint32) string { return v.ring.PartitionOwner(p) }
func (v *view) Member(id string) bool          { _, ok := v.members[id]; return ok }

// start builds node id's parts, every one driven by the cluster (Inline:
// no goroutine, no ticker).
func (c *Cluster) start(id string) (*Node, error) {
	n, err := build(id, env{
		sched:  c.Clock,
		ring:   c.cfg.Ring,
		shards: c.cfg.Shards,
		tick:   c.cfg.Tick,
		peers:  peers{c},
		send:   transport{c},
		leader: knownLeader{},
		now:    c.Clock.Now,
		logf:   c.logf,
	})
	if n != nil {
		n.c = c
	}
	return n, err
}

// env is what a node's parts are built on: the seam, the ring, the
// in-memory peers and replication transport, Raft's leader as the node
// knows it, and where ring changes are logged.
type env struct {
	sched    sched.Sched
	ring     ring.Config
	shards   int
	tick     time.Duration // the hand-off's resync retry
	peers    replication.Peers
	send     replication.Transport
	leader   clusterview.Leadership
	now      func() time.Time
	logf     func(format string, args ...any)
	onChange func(states []replication.State) // besides the replicator (nil: none)
	logger   *slog.Logger                     // the hand-off's (nil: discarded)
	// rings builds the policy's rings (nil: ring.New each time).
	rings func(members []string, cfg ring.Config) (*ring.Ring, error)
}

// build builds node id's parts on e, every one Inline: no goroutine, no
// ticker.
func build(id string, e env) (*Node, error) {
	n := &Node{ID: id, book: clusterview.NewBook(id), replicas: replication.NewStore(), now: e.now, logf: e.logf}
	n.policy = &clusterview.Policy{Self: id, Ring: e.ring, Departures: n.book, Leader: e.leader, NewRing: e.rings}

	var err error
	n.engine, err = shard.New(shard.Config{
		Shards: e.shards,
		Sched:  e.sched,
		Inline: true,
		OnChange: func(states []replication.State) {
			if e.onChange != nil {
				e.onChange(states)
			}
			n.repl.Enqueue(states)
		},
	})
	if err != nil {
		return nil, err
	}
	n.engine.Start()

	rc := replication.DefaultConfig()
	rc.Self = id
	rc.Sched, rc.Inline = e.sched, true
	if n.repl, err = replication.NewReplicator(rc, e.send, n.placement); err != nil {
		n.engine.Close()
		return nil, err
	}

	hc := replication.DefaultHandoffConfig(id, e.ring.PartitionCount)
	hc.ResyncRetry = e.tick
	hc.Sched, hc.Inline = e.sched, true
	hc.Logger = e.logger
	if n.handoff, err = replication.NewHandoff(hc, n.engine, e.peers, n.replicas, n.repl); err != nil {
		n.engine.Close()
		return nil, err
	}
	return n, nil
}

// stop closes the node's hand-off (the work it queued ends when run) and
// engine.
func (n *Node) stop() {
	n.handoff.Close()
	n.engine.Close()
	n.gone = true
}

// placement lists where a partition's copies go: its ring replicas but
// this node (node's replicaPlacement, unexported there).
func (n *Node) placement(p uint32) []string {
	v := n.view.Load()
	if v == nil {
		return nil
	}
	return replicasBy(v.ring, n.ID, p)
}

// replicasBy lists where partition p's copies go by ring r: its replicas
// but self.
func replicasBy(r *ring.Ring, self string, p uint32) []string {
	var out []string
	for _, id := range r.PartitionReplicas(p) {
		if id != self && id != "" {
			out = append(out, id)
		}
	}
	return out
}

// Refresh steps the node's ring-view policy over its book, as membership's
// refreshView does: a change goes to the hand-off first (partitions
// gained are pending from then on) and is published only after it.
func (n *Node) Refresh(ctx context.Context) error {
	old := n.view.Load()
	in := clusterview.Input{Now: n.now().UnixNano(), Members: n.book.Live(), Leaving: n.leaving, Joining: n.joining}
	if old != nil {
		in.Ring, in.Published = old.ring, old.members
	}
	ch, ok, err := n.policy.Step(in)
	if err != nil || !ok {
		return err
	}
	if old != nil && ch.Rebuilt {
		// As membership does: changes decided on the old ring go to its
		// replicas (Replicator.Seal).
		n.repl.Seal(func(p uint32) []string { return replicasBy(old.ring, n.ID, p) })
	}
	if err := n.handoff.ChangeRing(ctx, ch.Event); err != nil {
		return err
	}
	n.view.Store(&view{ring: ch.Ring, members: ch.Members})
	if ch.Rebuilt && n.logf != nil {
		n.logf("%s ring %v owns %d base %s", n.ID, ch.Ring.Members(), len(ch.Ring.OwnedBy(n.ID)), ch.Base)
	}
	return nil
}

// Item is one check of a counter: Rule and Key name it (as node's
// counter ids do), Limit is its effective limit.
type Item struct {
	Rule, Key string
	Limit     bucket.Limit
	Cost      int64
}

// Result is the answer for one Item.
type Result struct {
	Allowed   bool
	Remaining int64
	By        string // the node that decided it ("" when unavailable)
	Hops      int    // how many times it was forwarded
	Waited    bool   // the deciding node waited for the partition's pull
	Err       string // unavailable: why
}

// Check decides items entering at this node, one at a time, where the
// router says: here, at another node, after the pull, or not at all.
func (n *Node) Check(ctx context.Context, items []Item) ([]Result, error) {
	if n.gone {
		return nil, fmt.Errorf("%w: %s is not a member", ErrSim, n.ID)
	}
	out := make([]Result, len(items))
	for i, it := range items {
		r, err := n.route(ctx, it, replication.Via{}, 0)
		if err != nil {
			return nil, err
		}
		out[i] = r
		n.c.logf("check %s/%s at %s: allowed %t remaining %d by %s hops %d waited %t %s", it.Rule, it.Key, n.ID, r.Allowed, r.Remaining, r.By, r.Hops, r.Waited, r.Err)
	}
	return out, nil
}

// route obeys the router for one item that reached this node via via
// after hops forwards.
func (n *Node) route(ctx context.Context, it Item, via replication.Via, hops int) (Result, error) {
	v := n.view.Load()
	if v == nil {
		return Result{Hops: hops, Err: "no ring yet"}, nil
	}
	rt := replication.Router{Self: n.ID, Leaving: n.leaving, Table: n.handoff.Routes(), View: v}
	p := v.ring.Partition(it.Key)
	to := rt.Route(p, via)
	if to.Do == replication.Wait {
		if err := n.c.runUntilReady(n.handoff, p); err != nil {
			return Result{}, err
		}
	}
	if to.Do == replication.Decide || to.Do == replication.Wait {
		ok, movedTo := n.handoff.Pin(p)
		if ok {
			r, err := n.decide(ctx, it, p)
			n.handoff.Unpin(p)
			r.Hops, r.Waited = hops, to.Do == replication.Wait
			return r, err
		}
		to = rt.Reroute(p, movedTo, via) // handed off since it was routed: follow the counters
	}
	switch to.Do {
	case replication.Forward:
		next := n.c.nodes[to.To]
		if next == nil || next.gone {
			return Result{Hops: hops, Err: "owner " + to.To + " unreachable"}, nil
		}
		fwd := replication.Via{Forwarded: true}
		if via.Forwarded {
			fwd.Hops = via.Hops + 1
		}
		return next.route(ctx, it, fwd, hops+1)
	case replication.Unavailable:
		return Result{Hops: hops, Err: to.Why}, nil
	}
	return Result{}, fmt.Errorf("%w: router said %s", ErrSim, to.Do)
}

// decide decides it on this node's engine (partition p pinned).
func (n *Node) decide(ctx context.Context, it Item, p uint32) (Result, error) {
	out := make([]shard.Result, 1)
	err := n.engine.Check(ctx, []shard.Item{{ID: shard.CounterID(it.Rule, it.Key), Partition: p, Limit: it.Limit, Cost: it.Cost}}, out)
	if err != nil {
		return Result{}, err
	}
	return Result{Allowed: out[0].Allowed, Remaining: out[0].Remaining, By: n.ID}, nil
}

// knownLeader is Raft leadership as the simulation has it: always known.
type knownLeader struct{}

func (knownLeader) LeaderlessFor() time.Duration { return 0 }
func (knownLeader) TakeRegained() bool           { return false }

// leaveWatch is what a graceful leave watches of node n.
type leaveWatch struct{ n *Node }

var _ clusterview.Handoff = leaveWatch{}

func (w leaveWatch) Moved(p uint32) bool {
	st, _ := w.n.handoff.Routes().State(p)
	return st == replication.PartMoved
}
func (w leaveWatch) OthersInRing() bool { return w.n.book.OthersInRing() }
func (w leaveWatch) PeersAnswer() bool  { return true } // in memory, every member answers

// transport delivers replication sends into the destination's Store.
type transport struct{ c *Cluster }

var _ replication.Transport = transport{}

func (t transport) Replicate(ctx context.Context, to, from string, states []replication.State) error {
	n := t.c.nodes[to]
	if n == nil || n.gone {
		return fmt.Errorf("%w: replica %s unreachable", ErrSim, to)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return n.replicas.Apply(from, states)
}

// peers asks another node's hand-off in memory; the address is the id.
type peers struct{ c *Cluster }

var _ replication.Peers = peers{}

func (p peers) Handoff(ctx context.Context, addr string, req replication.HandoffRequest) (replication.HandoffReply, error) {
	n := p.c.nodes[addr]
	if n == nil || n.gone {
		return replication.HandoffReply{}, fmt.Errorf("%w: peer %s unreachable", ErrSim, addr)
	}
	if err := ctx.Err(); err != nil {
		return replication.HandoffReply{}, err
	}
	// Serve waits for partitions the holder is still pulling; on the
	// driver's goroutine that wait is running the queued work.
	for n.handoff.Waits(req) {
		if !p.c.Clock.RunNext() {
			return replication.HandoffReply{}, fmt.Errorf("%w: partitions %v are pending and no work is queued to fetch them", ErrSim, req.Parts)
		}
	}
	return n.handoff.Serve(ctx, req)
}
