package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirlimit/weir/internal/sched/schedtest"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// Config shapes a Cluster. Start from DefaultConfig.
type Config struct {
	// Seed draws every random number (the members' Boot).
	Seed uint64
	// Start is the clock's time when the cluster starts.
	Start time.Time
	// Ring is every node's ring configuration.
	Ring ring.Config
	// Shards is how many shards each node's engine has (explicit, never
	// GOMAXPROCS: how items split over shards must not depend on the
	// machine).
	Shards int
	// Tick is how far Step moves the clock: between two of the hand-offs'
	// ticks and of the replicators' flushes.
	Tick time.Duration
}

// DefaultConfig is production's ring (ring.DefaultConfig: 2039
// partitions, 100 virtual nodes, the balanced layout, 2 replicas), as the
// world's (shape.go), 2 shards a node and a 1 s step.
func DefaultConfig() Config {
	return Config{
		Seed:   1,
		Start:  time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		Ring:   ring.DefaultConfig(),
		Shards: 2,
		Tick:   time.Second,
	}
}

// ErrSim wraps every error of the simulation's own (not of a part).
var ErrSim = errors.New("sim")

// Cluster is N nodes' parts in one process. All its methods are called
// from one goroutine, the driver (see the package doc).
type Cluster struct {
	// Clock is the cluster's clock and the queue of the work the parts
	// start (pulls, resyncs, replication sends).
	Clock *schedtest.Sim

	cfg     Config
	nodes   map[string]*Node
	ids     []string                      // every node that joined, sorted
	members map[string]clusterview.Member // what membership says of the live members
	trace   []string
}

// New returns an empty cluster; Join adds nodes.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Ring.Validate(); err != nil {
		return nil, err
	}
	if cfg.Shards < 1 || cfg.Tick <= 0 {
		return nil, fmt.Errorf("%w: Shards %d must be >= 1 and Tick %v > 0", ErrSim, cfg.Shards, cfg.Tick)
	}
	return &Cluster{
		Clock:   schedtest.New(cfg.Seed, cfg.Start),
		cfg:     cfg,
		nodes:   map[string]*Node{},
		members: map[string]clusterview.Member{},
	}, nil
}

// Node returns the node id (nil if it never joined).
func (c *Cluster) Node(id string) *Node { return c.nodes[id] }

// Live lists the ids of the members, sorted.
func (c *Cluster) Live() []string {
	var out []string
	for _, id := range c.ids {
		if !c.nodes[id].gone {
			out = append(out, id)
		}
	}
	return out
}

// Trace is what happened, one line per decision and ring change, in order:
// two runs with the same seed and the same calls give the same trace.
func (c *Cluster) Trace() []string { return slices.Clone(c.trace) }

func (c *Cluster) logf(format string, args ...any) {
	at := c.Clock.Now().Sub(c.cfg.Start)
	c.trace = append(c.trace, fmt.Sprintf("%6s ", at)+fmt.Sprintf(format, args...))
}

// Join starts node id, tells membership (every node's book, and its own
// of every member) and refreshes every node's ring. The pulls the ring
// change asks for are queued, not run: checks that need them run them,
// and so do Step and Settle.
func (c *Cluster) Join(ctx context.Context, id string) (*Node, error) {
	if id == "" || c.nodes[id] != nil {
		return nil, fmt.Errorf("%w: node id %q empty or taken", ErrSim, id)
	}
	n, err := c.start(id)
	if err != nil {
		return nil, err
	}
	c.nodes[id] = n
	i, _ := slices.BinarySearch(c.ids, id)
	c.ids = slices.Insert(c.ids, i, id)
	m := clusterview.Member{ID: id, State: clusterview.Alive, GRPC: id, Boot: c.Clock.Uint64()}
	c.members[id] = m
	now := c.Clock.Now()
	for _, other := range c.Live() {
		n.book.Report(c.members[other], now)
		c.nodes[other].book.Report(m, now)
	}
	c.logf("join %s", id)
	return n, c.Refresh(ctx)
}

// Leave leaves node id gracefully, as node.Leave does: it is marked
// leaving (out of every ring, still deciding what it holds), the new
// owners pull its partitions (one Step at a time, at most maxSteps, until
// clusterview.Leave says they were all handed off), then membership
// reports it left, its parts close and the others refresh.
func (c *Cluster) Leave(ctx context.Context, id string, maxSteps int) error {
	n := c.nodes[id]
	if n == nil || n.gone {
		return fmt.Errorf("%w: %q is not a member", ErrSim, id)
	}
	var owned []uint32
	if v := n.view.Load(); v != nil && len(v.members) > 1 {
		owned = v.ring.OwnedBy(id)
	}
	n.leaving = true
	m := c.members[id]
	m.Leaving = true
	c.members[id] = m
	c.report(m)
	c.logf("leave %s (owned %d)", id, len(owned))
	if err := c.Refresh(ctx); err != nil {
		return err
	}
	l := clusterview.NewLeave(owned, c.Clock.Now)
	for step := 0; ; step++ {
		c.Clock.RunAll()
		out, left := l.Step(leaveWatch{n})
		if out == clusterview.HandedOff {
			break
		}
		if out == clusterview.NoPeers || step == maxSteps {
			return fmt.Errorf("%w: leave of %s: %s with %d partitions not handed off", ErrSim, id, out, left)
		}
		if err := c.Step(ctx); err != nil {
			return err
		}
	}
	delete(c.members, id)
	m.State = clusterview.Left
	c.report(m)
	n.stop()
	c.logf("left %s", id)
	return c.Refresh(ctx)
}

// report tells every live node's book what membership says of m.
func (c *Cluster) report(m clusterview.Member) {
	now := c.Clock.Now()
	for _, id := range c.Live() {
		c.nodes[id].book.Report(m, now)
	}
}

// Refresh lets every live node, in id order, step its ring-view policy
// over what its book says (see Node.Refresh).
func (c *Cluster) Refresh(ctx context.Context) error {
	for _, id := range c.Live() {
		if err := c.nodes[id].Refresh(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Step moves the clock one Tick and runs what it sets off, in a fixed
// order: each hand-off's tick, the queued work (pulls, resyncs), then
// node by node the engine's sweep and a flush of the replicator, whose
// sends run before the next node's flush. A send a replica refused stays
// pending for the next Step.
func (c *Cluster) Step(ctx context.Context) error {
	c.Clock.Advance(c.cfg.Tick)
	live := c.Live()
	for _, id := range live {
		if err := c.nodes[id].handoff.Tick(ctx); err != nil {
			return err
		}
	}
	c.Clock.RunAll()
	for _, id := range live {
		n := c.nodes[id]
		if err := n.engine.Tick(); err != nil {
			return err
		}
		if err := n.repl.Flush(ctx); err != nil {
			return err
		}
		c.Clock.RunAll()
	}
	return nil
}

// Settle runs the queued work and Steps until no live node has a
// partition pending and no work is queued: at least one Step, at most
// maxSteps.
func (c *Cluster) Settle(ctx context.Context, maxSteps int) error {
	for step := 0; step < maxSteps; step++ {
		c.Clock.RunAll()
		if err := c.Step(ctx); err != nil {
			return err
		}
		if c.settled() {
			c.logf("settled")
			for _, id := range c.Live() {
				n := c.nodes[id]
				es, err := n.engine.Stats(ctx)
				if err != nil {
					return err
				}
				hs, rs := n.handoff.Stats(), n.repl.Stats()
				c.logf("%s holds %d counters, %d copies; handed off %d promoted %d resynced %d unreached %d; replicated %d", id,
					es.Keys, n.replicas.Len(), hs.HandedOff, hs.Promoted, hs.Resynced, hs.Unreached, rs.Sent)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: not settled after %d steps", ErrSim, maxSteps)
}

func (c *Cluster) settled() bool {
	if c.Clock.Queued() > 0 {
		return false
	}
	for _, id := range c.Live() {
		if c.nodes[id].handoff.Routes().Pending() > 0 {
			return false
		}
	}
	return true
}

// runUntilReady runs queued work until partition p is no longer pending
// on h: a check told to wait for the pull, or a holder asked for a
// partition it is itself still pulling, waits this way on the driver's
// goroutine.
func (c *Cluster) runUntilReady(h *replication.Handoff, parts ...uint32) error {
	for _, p := range parts {
		for h.Routes().Ready(p) != nil {
			if !c.Clock.RunNext() {
				return fmt.Errorf("%w: partition %d is pending and no work is queued to fetch it", ErrSim, p)
			}
		}
	}
	return nil
}

// Close closes every node's parts and runs the work still queued (it
// sees them closed).
func (c *Cluster) Close() {
	for _, id := range c.Live() {
		c.nodes[id].stop()
	}
	c.Clock.RunAll()
}
