package membership

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// View is an immutable snapshot: the member set and the ring built from
// it. The cluster loop swaps it atomically; readers share it and change
// nothing in it.
type View struct {
	Version uint64 // ringVersion(Ring)
	Ring    *ring.Ring
	Members map[string]clusterview.Member
	Peers   [][]string // by partition: its replicas other than this node
}

var _ replication.View = (*View)(nil)

// PartitionOwner is p's owner in the view's ring.
func (v *View) PartitionOwner(p uint32) string { return v.Ring.PartitionOwner(p) }

// Member reports whether id is in the view's member list.
func (v *View) Member(id string) bool { _, ok := v.Members[id]; return ok }

// replicaPeers lists, by partition, the replicas of r other than self: the
// replicator asks for them at every flush, so they are built once a ring.
func replicaPeers(r *ring.Ring, self string) [][]string {
	out := make([][]string, r.PartitionCount())
	var buf []string
	for p := range out {
		buf = r.AppendPartitionReplicas(buf[:0], uint32(p))
		var to []string
		for _, id := range buf {
			if id != self && id != "" {
				to = append(to, id)
			}
		}
		out[p] = to
	}
	return out
}

// anyPeers reports whether some partition has a replica other than this
// node.
func anyPeers(peers [][]string) bool {
	for _, to := range peers {
		if len(to) > 0 {
			return true
		}
	}
	return false
}

// Addr is member id's gRPC address.
func (v *View) Addr(id string) (string, bool) {
	m, ok := v.Members[id]
	if !ok || m.GRPC == "" {
		return "", false
	}
	return m.GRPC, true
}

// clusterLoop owns ring changes and Raft group management. It re-reads the
// member list on every signal and on a timer.
func (c *Cluster) clusterLoop(ctx context.Context) {
	t := sched.Real{}.NewTicker(time.Second) // aligned with the other 1 s loops
	defer t.Stop()
	policy := &clusterview.Policy{Self: c.cfg.ID, Ring: c.cfg.Ring, Departures: c.gossiped, Leader: raftLeadership{c}}
	var settle *clusterview.Settle
	if len(c.cfg.Join) > 0 || c.cfg.BootstrapExpect > 1 { // started with others
		settle = &clusterview.Settle{Quiet: clusterview.SettleQuiet(c.cfg.GossipInterval), Wait: clusterview.FirstRingWait}
	}
	var gateways uint32
	for {
		members := c.refreshView(ctx, policy, settle)
		c.manageRaft(ctx, members)
		g := c.deps.Gateways.Gateways()
		if grouped := c.grouped(); g != gateways || grouped {
			gateways = g
			_ = c.ml.UpdateNode(time.Second) // gossip the new gateway count, or being in the group
		}
		var soon <-chan time.Time
		if settle != nil && c.view.Load() == nil {
			soon = time.After(settleLook) // take the first ring soon after the quiet period
		}
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		case <-t.C():
		case <-soon:
		}
	}
}

// settleLook is how often the cluster loop looks at the member list while
// it settles before the first ring.
const settleLook = 100 * time.Millisecond

// raftLeadership is what watchQuorum last saw of Raft leadership.
type raftLeadership struct{ c *Cluster }

var _ clusterview.Leadership = raftLeadership{}

func (l raftLeadership) LeaderlessFor() time.Duration {
	return time.Duration(l.c.leaderlessFor.Load())
}

func (l raftLeadership) TakeRegained() bool { return l.c.regained.Swap(false) }

// refreshView asks the ring-view policy (clusterview.Policy) whether the
// ring or the member set changed; if so it hands the new ring to the
// hand-off (which marks the partitions this node gains pending and pulls
// them) and only then publishes it to the check path. A node started with
// others (settle not nil) takes its first ring once its member list, after
// the join, settled. It returns the admitted members it read (nil while a
// join is under way or a member proves who it is), which the Raft group
// may bootstrap with before the first ring.
func (c *Cluster) refreshView(ctx context.Context, policy *clusterview.Policy, settle *clusterview.Settle) (out map[string]clusterview.Member) {
	members, wait := c.deps.Admitter.Admitted(c.ReadMembers())
	if wait {
		return nil // a new member is proving who it is (Admitter)
	}
	in := clusterview.Input{
		Now:     c.cfg.Now(),
		Members: members,
		Leaving: c.leaving.Load(),
		Joining: len(c.cfg.Join) > 0 && !c.joined.Load(),
	}
	in.Restoring = c.deps.Restorer.Restoring(func(id string) bool { _, ok := members[id]; return ok }, c.view.Load() != nil)
	old := c.view.Load()
	if old != nil {
		in.Ring, in.Published = old.Ring, old.Members
	}
	// The settle counts real time, not the policy's clock: gossip finds
	// members in real time (a test's clock may run 50 times slower).
	in.Settling = old == nil && !in.Joining && settle != nil && settle.Settling(time.Now().UnixNano(), members)
	// Nor is the Raft group bootstrapped from a partial list while the
	// members settle: nodes that see different members would bootstrap
	// different groups (8 started at once with --bootstrap-expect 3).
	if !in.Joining && !in.Settling {
		out = members
	}
	ch, ok, err := policy.Step(in)
	if err != nil {
		c.log.Error("ring rebuild failed", "err", err)
		return out
	}
	if !ok {
		return out
	}
	var peers [][]string
	replicated := false
	if ch.Rebuilt {
		peers = replicaPeers(ch.Ring, c.cfg.ID)
		if replicated = anyPeers(peers); replicated {
			// Before the hand-off reads counters for new replicas: from
			// here on every change is shipped (see Replicated).
			c.replicated.Store(true)
		}
	}
	switch ch.Base {
	case clusterview.BaseRegained:
		c.log.Warn("a Raft leader again after a long time without one: giving way to the counters the others hold", "base", ch.BaseOf)
	case clusterview.BaseSplit:
		c.log.Warn("back from a network split on the side without a Raft quorum: giving way to the counters the other side holds", "base", ch.BaseOf)
	}
	if ch.Rebuilt && old != nil && c.deps.Replicator != nil {
		// Changes decided on the old ring go to its replicas; what the
		// hand-off installs for the new one goes by the new.
		c.deps.Replicator.Seal(old.replicas)
	}
	if err := c.deps.Handoff.ChangeRing(ctx, ch.Event); err != nil {
		if ctx.Err() == nil {
			c.log.Error("hand-off did not take the ring", "err", err)
		}
		return out
	}
	if !ch.Rebuilt {
		c.view.Store(&View{Version: old.Version, Ring: old.Ring, Members: ch.Members, Peers: old.Peers})
		return out
	}
	r := ch.Ring
	v := &View{Version: ringVersion(r), Ring: r, Members: ch.Members, Peers: peers}
	c.view.Store(v)
	c.replicated.Store(replicated)
	c.met.published(v, c.cfg.ID)
	if c.deps.Published != nil {
		c.deps.Published(v)
	}
	c.log.Info("ring changed", "version", v.Version, "members", len(v.Members))
	return out
}

// ringVersion identifies a ring by what it is built from: a 32-bit hash of
// its sorted member ids and its config. Every node with the same ring
// members reports the same version, so an operator comparing nodes sees
// at once whether they agree; it is not ordered (a later ring is not a
// larger number). 32 bits keep it short and exact as a Prometheus gauge.
func ringVersion(r *ring.Ring) uint64 {
	var d xxhash.Digest
	d.Reset()
	ids := r.Members()
	sort.Strings(ids)
	for _, id := range ids {
		_, _ = d.WriteString(id)
		_, _ = d.Write([]byte{0})
	}
	c := r.Config()
	_, _ = fmt.Fprintf(&d, "%d/%d/%g/%d", c.PartitionCount, c.ReplicationFactor, c.Load, c.Replicas)
	return d.Sum64() & 0xffffffff
}

// PeerAddr is member id's gRPC address in the published view; an error
// wrapping limit.ErrUnavailable when there is no view or no such member.
func (c *Cluster) PeerAddr(id string) (string, error) {
	v := c.View()
	if v == nil {
		return "", fmt.Errorf("%w: no view", limit.ErrUnavailable)
	}
	addr, ok := v.Addr(id)
	if !ok {
		return "", fmt.Errorf("%w: unknown member %q", limit.ErrUnavailable, id)
	}
	return addr, nil
}

// Replicas lists where partition p's copies go (not this node) in the
// published view; shared, read only.
func (c *Cluster) Replicas(p uint32) []string {
	if v := c.View(); v != nil {
		return v.replicas(p)
	}
	return nil
}

// replicas lists where partition p's copies go (not this node) by v.
func (v *View) replicas(p uint32) []string {
	if int(p) < len(v.Peers) {
		return v.Peers[p]
	}
	return nil
}

// Replicated reports whether a change to this node's counters may have a
// replica to go to: false while the published ring gives no partition a
// replica but this node (one member, or a replication factor of 1), so
// the shards' changes need not be queued for the replicator. It turns
// true before the hand-off hears of a ring that gives replicas (a new
// replica's full copy is read after that: PlanResync), and false only
// once such a ring is published.
func (c *Cluster) Replicated() bool { return c.replicated.Load() }

// HTTPPeers maps the other members of the published view to their HTTP
// addresses.
func (c *Cluster) HTTPPeers() map[string]string {
	out := map[string]string{}
	if v := c.View(); v != nil {
		for id, m := range v.Members {
			if id != c.cfg.ID && m.HTTP != "" {
				out[id] = m.HTTP
			}
		}
	}
	return out
}
