package clusterview

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// Departures is what the policy asks membership besides the live members.
type Departures interface {
	// Departed returns the members gossip saw die or leave recently, with
	// how they went (Dead or Left).
	Departed() map[string]string
	// TakeRejoined returns the members that came back since the last call
	// after gossip had declared them dead, without having restarted.
	TakeRejoined() map[string]bool
}

var _ Departures = (*Book)(nil)

// Leadership is what this node knows of Raft leadership.
type Leadership interface {
	// LeaderlessFor is how long this node has known no Raft leader (0
	// while it knows one, and before it first knew one): Quorum's.
	LeaderlessFor() time.Duration
	// TakeRegained reports whether, since the last call, Quorum said this
	// node knows a Raft leader again after a long time without one.
	TakeRegained() bool
}

// Policy decides when this node's ring changes and what the hand-off is
// told about it: the ring over the live members, and, when a cluster went
// on without this node, the ring to pull from (the base). It holds no
// state of its own: each Step reads the view published last from its
// input, and the departed and rejoined members and the leader knowledge
// through Departures and Leadership.
type Policy struct {
	Self       string
	Ring       ring.Config
	Departures Departures
	Leader     Leadership
	// NewRing builds a ring over members (nil: ring.New). A simulator
	// running many nodes shares one ring per member set this way.
	NewRing func(members []string, cfg ring.Config) (*ring.Ring, error)
}

func (p *Policy) newRing(members []string) (*ring.Ring, error) {
	if p.NewRing != nil {
		return p.NewRing(members, p.Ring)
	}
	return ring.New(members, p.Ring)
}

// Input is one look at the cluster.
type Input struct {
	Now int64 // the hand-off's clock (replication.RingChanged.Now)
	// Members are the live members admitted to the view, this node among
	// them. Step does not change the map.
	Members map[string]Member
	// Leaving: this node is leaving; it drops out of its own ring at once.
	Leaving bool
	// Joining: a join is configured and has not succeeded yet.
	Joining bool
	// Restoring: this node loaded durable counters as replica copies and
	// not every member they were written with is back yet (nor has the
	// node's wait for them run out): no first ring yet, as while Joining.
	Restoring bool
	// Settling: this node starts with others and its member list still
	// changes (Settle): no first ring yet, as while Joining.
	Settling bool
	// Ring and Published are the view published last (nil before the
	// first): its ring and its members.
	Ring      *ring.Ring
	Published map[string]Member
}

// Base says why a ring change comes with a base.
type Base int

const (
	NoBase       Base = iota
	BaseFirst         // this node's first ring, the others' ring as the base
	BaseRegained      // a Raft leader again after a long time without one
	BaseSplit         // back from a split on the side without a Raft quorum
)

func (b Base) String() string {
	return [...]string{"none", "first", "regained", "split"}[b]
}

// Change is a decision of the policy: tell the hand-off Event, and once it
// took it, publish Ring with Members.
type Change struct {
	Ring    *ring.Ring        // Input.Ring when only metadata changed
	Members map[string]Member // the members to publish (this node marked leaving if it is)
	Rebuilt bool              // Ring is a new ring (the member set changed)
	Event   replication.RingChanged
	Base    Base     // why Event.Base is set (NoBase when it is not)
	BaseOf  []string // the members of the base ring
}

// Step decides what in calls for. It reports ok false when nothing
// changed, and, while no view was published yet, when a configured join
// has not succeeded (a solo ring would claim every partition), durable
// counters wait for their writers or the member list settles. An error
// means a ring could not be built; nothing should change then.
func (p *Policy) Step(in Input) (c Change, ok bool, err error) {
	if (in.Joining || in.Restoring || in.Settling) && in.Ring == nil {
		return Change{}, false, nil
	}
	members := in.Members
	if in.Leaving {
		members = maps.Clone(members)
		m := members[p.Self]
		m.Leaving = true
		members[p.Self] = m
	}
	// A quorum regained counts on the first view with another member in
	// it: Raft's leader is often known again before gossip has any member
	// back (a heal is seen on a rejoin, up to seconds later), and a view
	// of this node alone has nobody to give way to. Taken then, it was
	// lost, and the view that brought the others back had a leader known
	// already, so no base either (splitBase): the node kept its split
	// counters as a holder's (sim/testdata/fixed-regained-alone.txt).
	regained := len(RingMembers(members, p.Self)) > 0 && p.Leader.TakeRegained()
	if in.Ring != nil && sameRing(in.Published, members) {
		// Metadata-only changes (addresses) still need a new view.
		if sameMeta(in.Published, members) && !regained {
			return Change{}, false, nil
		}
		c, err := p.event(in.Now, in.Ring, members, in.Ring.Members(), regained)
		if err != nil {
			return Change{}, false, err
		}
		return c, true, nil
	}
	r, err := p.newRing(RingMembers(members, ""))
	if err != nil {
		return Change{}, false, err
	}
	var side []string // this node's side of the cluster before this ring
	if in.Ring != nil {
		side = in.Ring.Members()
	}
	if c, err = p.event(in.Now, r, members, side, regained); err != nil {
		return Change{}, false, err
	}
	c.Rebuilt = true
	return c, true, nil
}

// event is the change to ring r over the live members: what the hand-off
// is told about it. side lists the members of this node's previous ring
// (nil before its first). A cluster that went on without this node gives
// the hand-off its ring as the base to pull from: on this node's first
// ring (the ring of the other members), and when this node comes back
// from the side of a network split that had no Raft quorum: regained
// (this node knows a Raft leader again after a long time without one; see
// Quorum), or ring r brings back members from the other side (see
// splitBase). The base is then the ring of every member but this node.
func (p *Policy) event(now int64, r *ring.Ring, members map[string]Member, side []string, regained bool) (Change, error) {
	ev := replication.RingChanged{
		Now:     now,
		Place:   Assignments(r),
		Members: r.Members(),
		Live:    make(map[string]string, len(members)),
	}
	for id, m := range members {
		ev.Live[id] = m.GRPC
	}
	for id := range p.Departures.Departed() {
		ev.Departed = append(ev.Departed, id)
	}
	sort.Strings(ev.Departed)
	var (
		base []string
		why  Base
	)
	switch others := RingMembers(members, p.Self); {
	case side == nil && len(others) > 0:
		base, why = others, BaseFirst
	case regained && len(others) > 0:
		base, why = p.allButSelf(ev.Members), BaseRegained
	case side != nil:
		if base = p.splitBase(side, ev); base != nil {
			why = BaseSplit
		}
	}
	if base != nil {
		b, err := p.newRing(base)
		if err != nil {
			return Change{}, err
		}
		ev.Base = Assignments(b)
	}
	return Change{Ring: r, Members: members, Event: ev, Base: why, BaseOf: base}, nil
}

// splitBase returns the members of the ring the rest of the cluster had
// when ring ev ends a network split that this node is on the side without
// a quorum of: ev brings back members gossip had declared dead that come
// back with the same Boot (they lived through the split), and this node
// has known no Raft leader for QuorumLostAfter or more. At most one side
// of a split has a Raft quorum, so the side with it keeps its counters and
// the other gives way, whatever each side's partial gossip view says. The
// ring the others had is taken as every member but this node (exact for
// one node cut off; for a larger cut-off side, its other members answer
// for what they held). Otherwise it returns nil.
func (p *Policy) splitBase(side []string, ev replication.RingChanged) []string {
	var other []string
	for _, id := range ev.Members {
		if !slices.Contains(side, id) {
			other = append(other, id)
		}
	}
	if len(other) == 0 {
		return nil
	}
	rejoined := p.Departures.TakeRejoined()
	back := 0
	for _, id := range other {
		if rejoined[id] {
			back++
		}
	}
	if back == 0 {
		return nil // members that joined or restarted: an ordinary ring change
	}
	// A side no larger than what comes back of the other was not the
	// quorum side, even with a Raft leader known: a gossip view of this
	// node alone (UDP lost, Raft's connections up) promoted the others'
	// partitions while they served them, and the counters it decided
	// there are the fork (sim/testdata/fixed-view-alone.txt).
	if p.Leader.LeaderlessFor() < QuorumLostAfter && 2*len(side) > len(side)+back {
		return nil // this side has a Raft leader: it keeps its counters
	}
	return p.allButSelf(ev.Members)
}

func (p *Policy) allButSelf(ids []string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == p.Self })
}

// RingMembers lists the members that are in the ring (not leaving), less
// the one named except.
func RingMembers(members map[string]Member, except string) []string {
	ids := make([]string, 0, len(members))
	for id, m := range members {
		if !m.Leaving && id != except {
			ids = append(ids, id)
		}
	}
	return ids
}

// Assignments lists where r puts every partition.
func Assignments(r *ring.Ring) []replication.Assignment {
	out := make([]replication.Assignment, r.PartitionCount())
	for p := range out {
		out[p] = replication.Assignment{Owner: r.PartitionOwner(uint32(p)), Replicas: r.PartitionReplicas(uint32(p))}
	}
	return out
}

// Diff lists, by ascending partition, every partition whose owner or
// ordered replica list differs from old to new (replication.Diff over
// their Assignments). A nil ring is a ring with no members: Diff(nil, r)
// lists every partition r assigns. Both rings must have the same partition
// count (it is fixed for a cluster); Diff panics otherwise.
func Diff(old, new *ring.Ring) []replication.Move {
	switch {
	case old == nil && new == nil:
		return nil
	case old == nil:
		return replication.Diff(make([]replication.Assignment, new.PartitionCount()), Assignments(new))
	case new == nil:
		return replication.Diff(Assignments(old), make([]replication.Assignment, old.PartitionCount()))
	case old.PartitionCount() != new.PartitionCount():
		panic("clusterview: Diff of rings with different partition counts")
	}
	return replication.Diff(Assignments(old), Assignments(new))
}

// sameRing reports whether a and b put the same members in the ring.
func sameRing(a, b map[string]Member) bool {
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

func sameMeta(a, b map[string]Member) bool {
	for id, m := range a {
		if b[id] != m {
			return false
		}
	}
	return true
}
