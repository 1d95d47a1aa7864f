package node

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/replication"
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
	var gateways uint32
	for {
		n.refreshView()
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

// refreshView builds a new ring when the member set changed, hands it to
// the hand-off (which marks the partitions this node gains pending and
// pulls them) and only then publishes it to the check path.
func (n *Node) refreshView() {
	members, wait := n.admitted(n.readMembers())
	if wait {
		return // a new member is proving who it is (security.go)
	}
	if len(n.cfg.Join) > 0 && !n.joined.Load() && n.view.Load() == nil {
		// Not joined yet: a solo ring would claim every partition.
		return
	}
	if n.leaving.Load() {
		m := members[n.cfg.ID]
		m.Leaving = true
		members[n.cfg.ID] = m
	}
	old := n.view.Load()
	regained := n.regained.Swap(false)
	if old != nil && sameRing(old.members, members) {
		// Metadata-only changes (addresses) still need a new view.
		if sameMeta(old.members, members) && !regained {
			return
		}
		if n.changeRing(old.ring, members, old.ring.Members(), regained) {
			n.view.Store(&clusterView{version: old.version, ring: old.ring, members: members, peers: old.peers})
		}
		return
	}
	r, err := ring.New(ringMembers(members, ""), n.cfg.Ring)
	if err != nil {
		n.log.Error("ring rebuild failed", "err", err)
		return
	}
	var side []string // this node's side of the cluster before this ring
	if old != nil {
		side = old.ring.Members()
	}
	if !n.changeRing(r, members, side, regained) {
		return
	}
	version := ringVersion(r)
	n.view.Store(&clusterView{version: version, ring: r, members: members,
		peers: replicaPeers(r, n.cfg.ID)})
	if n.region != nil {
		// Keys that moved here: their ledger is on its way (region.Agent.RingChanged).
		n.region.RingChanged()
	}
	n.pruneForwarders(members)
	n.met.members.Set(float64(len(members)))
	n.met.ringVersion.Set(float64(version))
	n.met.partitionsOwned.Set(float64(len(r.OwnedBy(n.cfg.ID))))
	n.log.Info("ring changed", "version", version, "members", len(members))
}

// ringMembers lists the members that are in the ring (not leaving), less
// the one named except.
func ringMembers(members map[string]member, except string) []string {
	ids := make([]string, 0, len(members))
	for id, m := range members {
		if !m.Leaving && id != except {
			ids = append(ids, id)
		}
	}
	return ids
}

// changeRing tells the hand-off about ring r over the live members; side
// lists the members of this node's previous ring (nil before its first).
// A cluster that went on without this node gives the hand-off its ring as
// the base to pull from: on this node's first ring (the ring of the other
// members), and when this node comes back from the side of a network split
// that had no Raft quorum: regained (this node knows a Raft leader again
// after a long time without one; see watchQuorum), or ring r brings back
// members from the other side (see splitBase). The base is then the ring of
// every member but this node. It reports false when the hand-off did not
// take the ring (closing).
func (n *Node) changeRing(r *ring.Ring, members map[string]member, side []string, regained bool) bool {
	ev := replication.RingChanged{
		Now:     n.now(),
		Place:   assignments(r),
		Members: r.Members(),
		Live:    make(map[string]string, len(members)),
	}
	for id, m := range members {
		ev.Live[id] = m.GRPC
	}
	for id := range n.departedMembers() {
		ev.Departed = append(ev.Departed, id)
	}
	var base []string
	switch others := ringMembers(members, n.cfg.ID); {
	case side == nil && len(others) > 0:
		base = others
	case regained && len(others) > 0:
		base = slices.DeleteFunc(slices.Clone(ev.Members), func(id string) bool { return id == n.cfg.ID })
		n.log.Warn("a Raft leader again after a long time without one: taking the counters the others served meanwhile", "base", base)
	case side != nil:
		base = n.splitBase(side, ev)
	}
	if base != nil {
		b, err := ring.New(base, n.cfg.Ring)
		if err != nil {
			n.log.Error("ring rebuild failed", "err", err)
			return false
		}
		ev.Base = assignments(b)
	}
	if err := n.handoff.ChangeRing(n.ctx, ev); err != nil {
		if n.ctx.Err() == nil {
			n.log.Error("hand-off did not take the ring", "err", err)
		}
		return false
	}
	return true
}

// splitBase returns the members of the ring the rest of the cluster had
// when ring ev ends a network split that this node is on the side without
// a quorum of: ev brings back members gossip had declared dead that come
// back with the same Boot (they lived through the split), and this node
// has known no Raft leader for quorumLostAfter or more. At most one side of
// a split has a Raft quorum, so the side with it keeps its counters and the
// other gives way, whatever each side's partial gossip view says. The ring
// the others had is taken as every member but this node (exact for one
// node cut off; for a larger cut-off side, its other members answer for
// what they held). Otherwise it returns nil.
func (n *Node) splitBase(side []string, ev replication.RingChanged) []string {
	var other []string
	for _, id := range ev.Members {
		if !slices.Contains(side, id) {
			other = append(other, id)
		}
	}
	if len(other) == 0 {
		return nil
	}
	rejoined := n.takeRejoined()
	if !slices.ContainsFunc(other, func(id string) bool { return rejoined[id] }) {
		return nil // members that joined or restarted: an ordinary ring change
	}
	if cut := time.Duration(n.leaderlessFor.Load()); cut < quorumLostAfter {
		return nil // this side has a Raft leader: it keeps its counters
	}
	base := slices.DeleteFunc(slices.Clone(ev.Members), func(id string) bool { return id == n.cfg.ID })
	n.log.Warn("back from a network split on the side without a Raft quorum: taking the other side's counters", "base", base)
	return base
}

// assignments lists where r puts every partition.
func assignments(r *ring.Ring) []replication.Assignment {
	out := make([]replication.Assignment, r.PartitionCount())
	for p := range out {
		out[p] = replication.Assignment{Owner: r.PartitionOwner(uint32(p)), Replicas: r.PartitionReplicas(uint32(p))}
	}
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

// sameRing reports whether a and b put the same members in the ring.
func sameRing(a, b map[string]member) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ma := range a {
		mb, ok := b[id]
		if !ok || ma.Leaving != mb.Leaving {
			return false
		}
	}
	return true
}

func sameMeta(a, b map[string]member) bool {
	for id, m := range a {
		if b[id] != m {
			return false
		}
	}
	return true
}
