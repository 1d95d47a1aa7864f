package node

import (
	"fmt"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/persist"
	"github.com/weirlimit/weir/ring"
)

// clusterView is an immutable snapshot: the member set and the ring built
// from it. The cluster loop swaps it atomically.
type clusterView struct {
	version uint64 // ringVersion(ring)
	ring    *ring.Ring
	members map[string]member
	peers   [][]string // by partition: its replicas other than this node (read only)
}

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

func (v *clusterView) addr(id string) (string, bool) {
	m, ok := v.members[id]
	if !ok || m.GRPC == "" {
		return "", false
	}
	return m.GRPC, true
}

// clusterLoop owns ring changes and Raft group management. It re-reads the
// member list on every signal and on a timer.
func (n *Node) clusterLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	policy := &clusterview.Policy{Self: n.cfg.ID, Ring: n.cfg.Ring, Departures: n.gossiped, Leader: raftLeadership{n}}
	var gateways uint32
	for {
		n.refreshView(policy)
		n.manageRaft()
		if g := n.api.Gateways(); g != gateways {
			gateways = g
			_ = n.ml.UpdateNode(time.Second) // gossip the new gateway count
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.changed:
		case <-t.C:
		}
	}
}

// raftLeadership is what watchQuorum last saw of Raft leadership.
type raftLeadership struct{ n *Node }

var _ clusterview.Leadership = raftLeadership{}

func (l raftLeadership) LeaderlessFor() time.Duration {
	return time.Duration(l.n.leaderlessFor.Load())
}

func (l raftLeadership) TakeRegained() bool { return l.n.regained.Swap(false) }

// refreshView asks the ring-view policy (clusterview.Policy) whether the
// ring or the member set changed; if so it hands the new ring to the
// hand-off (which marks the partitions this node gains pending and pulls
// them) and only then publishes it to the check path.
func (n *Node) refreshView(policy *clusterview.Policy) {
	members, wait := n.sec.Admitted(n.readMembers())
	if wait {
		return // a new member is proving who it is (node/security)
	}
	in := clusterview.Input{
		Now:     n.now(),
		Members: members,
		Leaving: n.leaving.Load(),
		Joining: len(n.cfg.Join) > 0 && !n.joined.Load(),
	}
	in.Restoring = n.durable.Restoring(func(id string) bool { _, ok := members[id]; return ok }, n.view.Load() != nil)
	old := n.view.Load()
	if old != nil {
		in.Ring, in.Published = old.ring, old.members
	}
	c, ok, err := policy.Step(in)
	if err != nil {
		n.log.Error("ring rebuild failed", "err", err)
		return
	}
	if !ok {
		return
	}
	switch c.Base {
	case clusterview.BaseRegained:
		n.log.Warn("a Raft leader again after a long time without one: taking the counters the others served meanwhile", "base", c.BaseOf)
	case clusterview.BaseSplit:
		n.log.Warn("back from a network split on the side without a Raft quorum: taking the other side's counters", "base", c.BaseOf)
	}
	if err := n.handoff.ChangeRing(n.ctx, c.Event); err != nil {
		if n.ctx.Err() == nil {
			n.log.Error("hand-off did not take the ring", "err", err)
		}
		return
	}
	if !c.Rebuilt {
		n.view.Store(&clusterView{version: old.version, ring: old.ring, members: c.Members, peers: old.peers})
		return
	}
	r := c.Ring
	version := ringVersion(r)
	n.view.Store(&clusterView{version: version, ring: r, members: c.Members,
		peers: replicaPeers(r, n.cfg.ID)})
	if n.region != nil {
		// Keys that moved here: their ledger is on its way (region.Agent.RingChanged).
		n.region.RingChanged()
	}
	n.pruneForwarders(c.Members)
	n.met.members.Set(float64(len(c.Members)))
	n.met.ringVersion.Set(float64(version))
	n.met.partitionsOwned.Set(float64(len(r.OwnedBy(n.cfg.ID))))
	n.log.Info("ring changed", "version", version, "members", len(c.Members))
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

// publishedRing is the published view's ring, nil before the first.
func (n *Node) publishedRing() persist.Ring {
	if v := n.view.Load(); v != nil {
		return v.ring
	}
	return nil
}
