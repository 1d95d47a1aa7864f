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
	members := n.readMembers()
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
	if old != nil && sameRing(old.members, members) {
		// Metadata-only changes (addresses) still need a new view.
		if sameMeta(old.members, members) {
			return
		}
		if n.changeRing(old.ring, members, old.ring.Members()) {
			n.view.Store(&clusterView{version: old.version, ring: old.ring, members: members})
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
	if !n.changeRing(r, members, side) {
		return
	}
	version := ringVersion(r)
	n.view.Store(&clusterView{version: version, ring: r, members: members})
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
// members), and when this node comes back from the smaller side of a
// network split (the ring of the other side; see smallerSide). It reports
// false when the hand-off did not take the ring (closing).
func (n *Node) changeRing(r *ring.Ring, members map[string]member, side []string) bool {
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
	case side != nil:
		base = n.otherSide(side, ev)
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

// otherSide returns the members of the other side of a network split when
// ring ev merges this node's side (the members of its previous ring) with
// it and this node's side is the smaller one: the ring of the other side
// is then the base to pull from. The other side is the members new to the
// ring that lived through the split (they come back with the same Boot)
// and the members declared dead around the same time that gossip has not
// merged yet; those are added to ev.Live at their last address, so the
// pulls ask them too. Otherwise (no split, or the larger side) it returns
// nil.
func (n *Node) otherSide(side []string, ev replication.RingChanged) []string {
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
	var lostAt time.Time
	for _, id := range other {
		if t, ok := rejoined[id]; ok && (lostAt.IsZero() || t.Before(lostAt)) {
			lostAt = t
		}
	}
	if lostAt.IsZero() {
		return nil // members that joined or restarted: an ordinary ring change
	}
	missing := n.lostAround(lostAt, splitWindow)
	for id := range missing {
		if !slices.Contains(other, id) {
			other = append(other, id)
		}
	}
	if !smallerSide(side, other) {
		return nil
	}
	for id, addr := range missing {
		if _, ok := ev.Live[id]; !ok && addr != "" {
			ev.Live[id] = addr
		}
	}
	sort.Strings(other)
	n.log.Warn("back from the smaller side of a network split: taking the other side's counters", "side", side, "other", other)
	return other
}

// splitWindow is how close together members must have been declared dead
// to count as one side of one split.
const splitWindow = 30 * time.Second

// smallerSide reports whether side gives way to other when the two sides of
// a network split merge: the side with fewer members does, and of two equal
// sides the one without the smallest member id. Both sides decide the same,
// each from its own view, so one gives way.
func smallerSide(side, other []string) bool {
	if len(side) != len(other) {
		return len(side) < len(other)
	}
	return slices.Min(other) < slices.Min(side)
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
