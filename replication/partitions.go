package replication

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weirlimit/weir/internal/bug"
)

// PartState is one partition's state as one node sees it.
type PartState uint8

// Partition states.
const (
	// PartNone: this node neither serves nor holds the partition; route by
	// the ring.
	PartNone PartState = iota
	// PartReady: this node owns the partition (or still serves it until it
	// is pulled away) and decides it locally.
	PartReady
	// PartPending: this node owns the partition by the ring but waits for
	// its counters; items go to Peer (the previous holder), or wait when
	// Peer is "".
	PartPending
	// PartMoved: handed off to Peer; items go there.
	PartMoved
	// PartReleased: the ring gave the partition away, but its counters are
	// here until the new owner pulls them.
	PartReleased
)

var partStateNames = [...]string{"none", "ready", "pending", "moved", "released"}

func (s PartState) String() string {
	if int(s) < len(partStateNames) {
		return partStateNames[s]
	}
	return fmt.Sprintf("PartState(%d)", uint8(s))
}

// Holds reports whether a node in state s holds the partition's counters
// (the ones to hand off). Holding passes from node to node with each
// hand-off, so at most one live node holds a partition.
func (s PartState) Holds() bool { return s == PartReady || s == PartReleased }

// Assignment is where one partition lives in one ring: its owner and its
// replicas, owner first (as ring.PartitionReplicas lists them).
type Assignment struct {
	Owner    string
	Replicas []string
}

// Partitions is the pure partition state machine of one node: every
// partition's state, the ring placement it was last told about and the
// replica copies waiting to be forgotten. Step is its only mutator; it
// does no I/O and reads no clock (every event carries its time), so a
// scenario of events always gives the same states and effects. Exactly one
// goroutine may call Step (Handoff's loop; a test).
type Partitions struct {
	self    string
	grace   int64 // ns a released partition or a dropped replica is kept
	settle  int64 // ns a partition may stay moved while the ring says it is ours
	parts   []partition
	place   []Assignment // nil before the first ring
	members map[string]bool
	// departed: the members gossip saw die or leave, by the last ring.
	departed map[string]bool
	dropAt   map[uint32]int64 // replica copies to forget then, unless placed here again
}

type partition struct {
	state PartState
	peer  string // pending: source (or ""); moved: the puller
	since int64  // released, moved: when; ready with copies: since when
	// copies: the counters were settled here from replica copies (no
	// holder handed them over) and are provisional (see Reply.Copies).
	// A ready partition's become its own after the settle time; a
	// partition released or asked for before that stays provisional.
	copies bool
	// back: moved to a puller this node's gossip had declared gone when
	// it asked (it restarted, or lived through a split, and pulled
	// before this node heard of it again). Its departure is older than
	// the mark, so for Settle it does not make the mark stale (see
	// ringChanged): gossip has such a puller back within about a second;
	// one it does not have back by then may have gone again.
	back bool
}

// NewPartitions returns the machine for node self with n partitions, all
// PartNone. grace is how long (ns) a released partition waits to be pulled
// and a no longer placed replica copy is kept for a new owner to pull.
// settle is how long (ns) a partition may stay moved to another node while
// this node's ring says this node owns it before it takes it back (see
// Tick).
func NewPartitions(self string, n int, grace, settle int64) *Partitions {
	return &Partitions{self: self, grace: grace, settle: settle, parts: make([]partition, n), members: map[string]bool{}, dropAt: map[uint32]int64{}}
}

// Len is the number of partitions.
func (m *Partitions) Len() int { return len(m.parts) }

// State returns partition p's state and peer.
func (m *Partitions) State(p uint32) (PartState, string) {
	return m.parts[p].state, m.parts[p].peer
}

// Owner is p's owner by the last ring ("" before the first).
func (m *Partitions) Owner(p uint32) string {
	if m.place == nil {
		return ""
	}
	return m.place[p].Owner
}

// An Event is an input to Step.
type Event interface{ isEvent() }

// RingChanged: gossip produced a new ring.
type RingChanged struct {
	Now int64
	// Place is the new ring's placement of every partition.
	Place []Assignment
	// Members are the ring's members; Live the members gossip reports
	// alive or leaving (a leaving member is out of the ring but still
	// serves its partitions until they are pulled); Departed the members
	// gossip saw die or leave.
	Members  []string
	Live     map[string]string // id → gRPC address
	Departed []string
	// Base is the placement of the ring the rest of the cluster had
	// without this node, given on this node's first ring (nil when it has
	// no other member) and when this node comes back from the smaller side
	// of a network split. Partitions this node takes over are pulled from
	// their owners there. Coming back from a split, this node also gives
	// way on every partition it holds but does not own now (it keeps them,
	// released, as provisional counters: passed on only as copies) and lets
	// go of its moved marks: the larger side may have served those
	// partitions meanwhile, and a holder's counters win (the smaller side's
	// decisions during the split are the over-admission docs/design.md
	// states for a split); where no other node holds them, nobody served
	// them, and this node's counters are the only ones there are.
	Base []Assignment
}

// Arrived: the counters of Parts, pulled or promoted, are installed.
// Copies lists those of Parts that no holder handed over: settled from
// replica copies (this node's or others'), or fresh.
type Arrived struct {
	Now    int64
	Parts  []uint32
	Copies []uint32
}

// Unreached: a take-back (Pull with Back) got no answer from Peer, which
// holds Parts: they go back to moved to Peer, and are taken back again
// after the settle time.
type Unreached struct {
	Now   int64
	Peer  string
	Parts []uint32
}

// Ask: node To asks for Parts' counters (it owns them now). Step answers
// with one Reply effect.
type Ask struct {
	Now   int64
	To    string
	Parts []uint32
}

// HandBack: a hand-off to To failed after Ask passed the partitions on (the
// puller installs nothing): this node holds them again.
type HandBack struct {
	Now   int64
	To    string
	Parts []uint32
}

// Tick: time passed. Released partitions nobody pulled within the grace
// period are let go, replica copies no longer placed here are forgotten,
// and partitions that stayed moved for the settle time although this
// node's ring says it owns them are pulled back (the ring of the node that
// pulled them disagreed with this one, and has come round).
type Tick struct{ Now int64 }

func (RingChanged) isEvent() {}
func (Arrived) isEvent()     {}
func (Ask) isEvent()         {}
func (HandBack) isEvent()    {}
func (Unreached) isEvent()   {}
func (Tick) isEvent()        {}

// An Effect is what the caller of Step must do.
type Effect interface{ isEffect() }

// Pull: fetch these partitions' counters (each from its sources, best
// first; none: promote this node's own copies or start fresh), install
// them, then step Arrived. With Keep (coming back from a split), a
// partition no live node holds keeps the counters this node has: replica
// copies and fresh counters would be older than them.
//
// With Back (a take-back from a live member, see Tick), a partition whose
// holder does not answer at all is not settled from this node's copies:
// the holder still has its counters, and this node may have none (it did
// not replicate them while they were away). The caller steps Unreached
// for it instead, and the take-back is tried again after the settle time.
//
// Held lists gained partitions whose counters this node still holds
// (released, never pulled): when no live node holds them, the copies
// found replace those counters key by key, and a key no holder or copy
// knows keeps what this node decided.
type Pull struct {
	Gain []Source
	Keep bool
	Back bool
	Held []uint32
}

// Resync: send the full state of these partitions (still served here) to
// their replicas; one gained a member that holds nothing yet.
type Resync struct{ Parts []uint32 }

// Reply answers an Ask: Held passed to the asker (export their counters,
// once the checks deciding them here are done), Moved handed on earlier
// (the asker follows the chain), the rest neither (replica copies only).
//
// Copies are passed on like Held, but their counters are provisional:
// settled here from replica copies within the settle time, or a ring
// flap's leftovers (a node whose gossip view shrank to itself for a moment
// promotes its copies of partitions their owner never stopped serving,
// and holds them, released, once the view is back). The asker gets them
// as replica copies, used only when no live node holds the partition,
// never over a holder's counters or, coming back from a split, its own.
type Reply struct {
	Held   []uint32
	Copies []uint32
	Moved  []Moved
}

// Moved names where a partition went.
type Moved struct {
	Partition uint32
	To        string
}

// DropCounters: forget these partitions' counters (released and never
// pulled: whoever owns them got them elsewhere, or they are one side's
// leftovers after a network split).
type DropCounters struct{ Parts []uint32 }

// DropReplicas: forget this node's replica copies of these partitions.
type DropReplicas struct{ Parts []uint32 }

func (Pull) isEffect()         {}
func (Resync) isEffect()       {}
func (Reply) isEffect()        {}
func (DropCounters) isEffect() {}
func (DropReplicas) isEffect() {}

// Step applies one event and returns what the caller must do, in order.
func (m *Partitions) Step(ev Event) []Effect {
	switch e := ev.(type) {
	case RingChanged:
		return m.ringChanged(e)
	case Arrived:
		for _, p := range e.Parts {
			m.arrived(p, e.Now, slices.Contains(e.Copies, p))
		}
	case Ask:
		return []Effect{m.ask(e)}
	case HandBack:
		for _, p := range e.Parts {
			m.handBack(p, e.To, e.Now)
		}
	case Tick:
		return m.tick(e.Now)
	case Unreached:
		var settle []Source
		for _, p := range e.Parts {
			pt := &m.parts[p]
			switch {
			case pt.state != PartPending || pt.peer != e.Peer:
			case m.departed[e.Peer]:
				// Gossip declared the holder gone while the take-back
				// asked it: nobody holds the counters now, so the best
				// copies settle it (a mark back to it would never be
				// taken back again: it is out of the ring).
				*pt = partition{state: PartPending}
				settle = append(settle, Source{Partition: p})
			default:
				*pt = partition{state: PartMoved, peer: e.Peer, since: e.Now}
			}
		}
		if len(settle) > 0 {
			return []Effect{Pull{Gain: settle}}
		}
	}
	return nil
}

func (m *Partitions) ringChanged(e RingChanged) []Effect {
	if len(e.Place) != len(m.parts) {
		panic(fmt.Sprintf("replication: ring of %d partitions for a table of %d", len(e.Place), len(m.parts)))
	}
	old, oldMembers := m.place, m.members
	newMembers := set(e.Members)
	m.departed = set(e.Departed)
	m.place, m.members = e.Place, newMembers
	adopt := old != nil && e.Base != nil
	switch {
	case old == nil && e.Base == nil:
		m.firstRing(e)
		return nil
	case e.Base != nil:
		m.giveWay(e)
		old, oldMembers = e.Base, membersOf(e.Base)
	}
	alive := func(id string) bool { _, ok := e.Live[id]; return ok }
	reclaim := m.dropStaleMarks(e, old, oldMembers, newMembers, alive)
	moves := Diff(old, e.Place)
	gain, lose, dropReplica := PlanHandoff(m.self, moves, alive)
	for _, r := range reclaim {
		// One the ring also gave this node anew is pulled once, from the
		// take-back's sources first: the ring's old replicas may be only
		// this node, whose copies are older than what it handed over.
		i := slices.IndexFunc(gain, func(g Source) bool { return g.Partition == r.Partition })
		if i < 0 || bug.On(bug.DoublePull) {
			gain = append(gain, r)
			continue
		}
		for _, id := range gain[i].From {
			if !slices.Contains(r.From, id) {
				r.From = append(r.From, id)
			}
		}
		if o := old[r.Partition].Owner; r.Gone != "" && o != r.Gone && slices.Contains(gain[i].From, o) {
			// The ring's previous owner is alive and not the gone
			// puller: the puller may have handed the counters on to
			// it, and it decides them still. It is asked first, not
			// replaced by the copies the puller sent here, older then
			// (sim/testdata/fixed-dropped-mark-owner.txt).
			r.From = askFirst(r.From, o)
			r.Gone = ""
		}
		gain[i] = r
	}
	gain = m.gainedMoved(gain, alive)
	var resync []uint32
	for _, p := range PlanResync(m.self, moves) {
		if m.parts[p].state == PartReady {
			resync = append(resync, p)
		}
	}
	// The new owner may still pull these copies (its previous owner died):
	// keep them for the grace period.
	for _, p := range dropReplica {
		m.dropAt[p] = e.Now + m.grace
	}
	// Lost partitions are routed by the ring from now on; their counters
	// stay until the new owner pulls them (items it forwards here meanwhile
	// are still decided here). One still being pulled stays pending: it is
	// settled on arrival.
	for _, p := range lose {
		if pt := &m.parts[p]; pt.state == PartReady {
			*pt = partition{state: PartReleased, since: e.Now, copies: m.provisional(pt, e.Now)}
		}
	}
	gain, held := m.startPulls(gain, e.Base == nil)
	var out []Effect
	if len(gain) > 0 {
		out = append(out, Pull{Gain: gain, Keep: adopt, Held: held})
	}
	if len(resync) > 0 {
		out = append(out, Resync{Parts: resync})
	}
	return out
}

// firstRing is the first ring of a node alone: it serves what it owns.
func (m *Partitions) firstRing(e RingChanged) {
	for p := range m.parts {
		if e.Place[p].Owner == m.self {
			m.parts[p] = partition{state: PartReady}
		}
	}
}

// giveWay gives way to the others' counters by a ring with a base: a
// cluster that went on without this node (it is new, or it comes back from
// the smaller side of a split) is compared with the ring it had, and
// partitions this node takes over are pulled from their owners there
// before it answers for them (Pull.Keep). What this node holds of the
// others' partitions stays here, released, as provisional counters: asked
// for, it passes them on as replica copies, which the puller uses only
// when no other live node holds the partition. So where the others served
// a partition meanwhile, their counters win; where nobody did, these are
// the only counters there are. Letting them go lost them: a node that
// lost its Raft leader while members joined it, and whose probe went
// unanswered, counted a quorum regained, and its joiners, which had held
// nothing, pulled nothing (TestClusterBackToBackJoinsKeepCounters,
// sim/testdata/fixed-regained-joiner.txt). Its moved marks are dropped.
func (m *Partitions) giveWay(e RingChanged) {
	for p := range m.parts {
		pt := &m.parts[p]
		switch {
		case pt.state.Holds() && e.Place[p].Owner != m.self:
			since := e.Now
			if pt.state == PartReleased {
				since = pt.since // the grace runs from the release
			}
			*pt = partition{state: PartReleased, since: since, copies: true}
		case pt.state == PartMoved:
			*pt = partition{}
		}
	}
}

// dropStaleMarks drops the moved marks this ring makes stale and returns
// the partitions of dropped marks this node takes back at once.
func (m *Partitions) dropStaleMarks(e RingChanged, old []Assignment, oldMembers, newMembers map[string]bool, alive func(string) bool) []Source {
	departed := m.departed
	// While members only join, every node that handed a partition on keeps
	// a moved mark to the next holder, so a chain of marks leads to the
	// counters even for a new owner that has not seen the latest ring yet:
	// marks stay until their puller is gone. A member leaving the ring
	// breaks such chains (its own marks go with it, and once it is gone
	// items sent to it fail), so then a mark whose puller no longer owns
	// the partition by this ring is dropped and the partition is routed by
	// the ring, to the owner that promoted or pulled its counters (or is
	// pulling them, and forwards to where they are until then). A puller
	// neither ring knows is not stale: it pulled on a newer ring than this
	// one.
	shrank := false
	for id := range oldMembers {
		if !newMembers[id] {
			shrank = true
			break
		}
	}
	// A dropped mark of a partition this node owns by the new ring (it was
	// pulled away on a ring this node never agreed with, and the puller is
	// gone or out of the ring before this node took it back) is taken back
	// at once: this node holds no counters for it, and deciding it here on
	// none would start every key of it from a full bucket. It is pulled
	// from the puller if alive, else from the copies the other replicas of
	// this ring hold, or this node's own if the gone puller sent them
	// (takeBackFrom: its own are older than the counters it handed over)
	// and this node was its replica by the last ring (freshCopies).
	var reclaim []Source
	for p := range m.parts {
		pt := &m.parts[p]
		if pt.state != PartMoved {
			continue
		}
		known := newMembers[pt.peer] || oldMembers[pt.peer]
		if pt.back && alive(pt.peer) {
			pt.back = false // gossip has it back: an ordinary mark from now on
		}
		stale := departed[pt.peer] && !(pt.back && e.Now-pt.since < m.settle)
		if pt.peer == "" || stale || (shrank && known && e.Place[p].Owner != pt.peer) {
			if e.Place[p].Owner == m.self && e.Base == nil && !bug.On(bug.DroppedMovedMark) {
				src := Source{Partition: uint32(p), From: m.takeBackFrom(uint32(p), pt.peer, alive)}
				if !alive(pt.peer) && m.freshCopies(old, uint32(p)) {
					src.Gone = pt.peer
				}
				reclaim = append(reclaim, src)
			}
			*pt = partition{}
		}
	}
	return reclaim
}

// gainedMoved returns gain with the partitions still moved (their marks
// survived dropStaleMarks) pulled from their puller first: the counters
// are there, and the ring's old owner and replicas may never have had
// them (the puller took them on a ring this node did not have). One whose
// puller this node's gossip does not have alive (it restarted and pulled
// before this node saw it back, or pulled on a newer ring) is left to the
// mark: asked of the others, it was settled from copies beside the
// puller's counters, two ready holders (the simulator's join-leave
// sequence, sim/testdata/fixed-gained-moved.txt). Items go to the puller
// meanwhile; once gossip has it back the mark is an ordinary one, taken
// back after Settle if this node still owns the partition (Tick).
func (m *Partitions) gainedMoved(gain []Source, alive func(string) bool) []Source {
	out := gain[:0]
	for _, g := range gain {
		if pt := m.parts[g.Partition]; pt.state == PartMoved && !bug.On(bug.GainedMoved) {
			if !alive(pt.peer) {
				continue
			}
			g.From = askFirst(g.From, pt.peer)
		}
		out = append(out, g)
	}
	return out
}

// askFirst returns from with id first (and nowhere else).
func askFirst(from []string, id string) []string {
	return append([]string{id}, slices.DeleteFunc(from, func(f string) bool { return f == id })...)
}

// startPulls marks the gained partitions pending (fresh: a ring without a
// base) and returns those it pulls, and those of them it still held.
//
// A gained partition this node still holds (released, and not pulled
// by the owner in between, e.g. a ring that flapped) may have counters
// nobody else has: if no live node holds it, copies are added to them
// rather than replacing them.
//
// A gained partition still pending is left to the pull in flight (it
// is settled by this ring on arrival): one pull at a time per
// partition. A second one would install over counters the first had
// already settled and checks had decided on (its Drop and Import are
// two steps, so a check between them starts a key from a full bucket,
// which the Import then keeps: the chaos suite's repeated cuts caught
// it after two rings with a base in a row).
func (m *Partitions) startPulls(gain []Source, fresh bool) (pull []Source, held []uint32) {
	gain = slices.DeleteFunc(gain, func(g Source) bool { return m.parts[g.Partition].state == PartPending && !bug.On(bug.TwoPulls) })
	for _, g := range gain {
		if fresh && m.parts[g.Partition].state.Holds() {
			held = append(held, g.Partition)
		}
		peer := firstSource(m.self, g.From)
		if g.Gone != "" {
			peer = "" // a take-back's sources hold copies at most: items wait here
		}
		m.parts[g.Partition] = partition{state: PartPending, peer: peer}
	}
	return gain, held
}

// firstSource is the peer a gained partition's items go to until it
// arrives: the best planned source, or "" when that is this node's own
// replica copy or no copy survives (items then wait).
func firstSource(self string, from []string) string {
	if len(from) == 0 || from[0] == self {
		return ""
	}
	return from[0]
}

// arrived settles a pulled partition: ready when this node owns it now (or
// has no ring yet), otherwise released, holding the counters for whoever
// pulls them next. copies: no holder handed them over.
func (m *Partitions) arrived(p uint32, now int64, copies bool) {
	pt := &m.parts[p]
	switch {
	case m.place == nil || m.place[p].Owner == m.self:
		*pt = partition{state: PartReady, since: now, copies: copies}
	case pt.state == PartPending:
		*pt = partition{state: PartReleased, since: now, copies: copies}
	}
}

// provisional reports whether pt's counters are still provisional at now:
// settled from replica copies, and not served here as ready for the settle
// time since (see Reply.Copies).
func (m *Partitions) provisional(pt *partition, now int64) bool {
	return pt.copies && (pt.state != PartReady || now-pt.since < m.settle)
}

// unpulled reports whether pt is a released partition that nobody pulled
// within the settle time: its owner did not need it (it never stopped
// serving it, as a node back from a pause whose partitions the others
// took over meanwhile), so its counters are leftovers, passed on only as
// copies. Handed over as a holder's, they replaced the owner's live
// counters when it later pulled the partition after giving way (the
// chaos suite: a node paused, then flapping alone during another node's
// cut, took the leftovers of its own partitions back from the node that
// had served them during the pause; spent keys came back).
func (m *Partitions) unpulled(pt *partition, now int64) bool {
	return pt.state == PartReleased && now-pt.since >= m.settle && !bug.On(bug.UnpulledLeftovers)
}

// ask passes each partition this node holds to e.To (marked moved: later
// items go there; provisional ones as copies) and names where the others
// went when this node handed them on earlier. A partition this node is
// itself still pulling is neither: the caller waits for it to arrive
// before asking.
func (m *Partitions) ask(e Ask) Reply {
	var r Reply
	for _, p := range e.Parts {
		pt := &m.parts[p]
		switch {
		case pt.state.Holds() && (m.provisional(pt, e.Now) || m.unpulled(pt, e.Now)) && !bug.On(bug.FlapLeftovers):
			*pt = partition{state: PartMoved, peer: e.To, since: e.Now, copies: true, back: m.departed[e.To]}
			r.Copies = append(r.Copies, p)
		case pt.state.Holds():
			*pt = partition{state: PartMoved, peer: e.To, since: e.Now, back: m.departed[e.To]}
			r.Held = append(r.Held, p)
		case pt.state == PartMoved && pt.peer != "":
			r.Moved = append(r.Moved, Moved{Partition: p, To: pt.peer})
		}
	}
	return r
}

// handBack undoes ask for a puller that installed nothing: this node holds
// p again, ready if it owns p. Nothing changes unless p went to exactly to.
func (m *Partitions) handBack(p uint32, to string, now int64) {
	pt := &m.parts[p]
	if pt.state != PartMoved || pt.peer != to {
		return
	}
	if m.place == nil || m.place[p].Owner == m.self {
		*pt = partition{state: PartReady, since: now, copies: pt.copies}
		return
	}
	*pt = partition{state: PartReleased, since: now, copies: pt.copies}
}

func (m *Partitions) tick(now int64) []Effect {
	var forget, drop []uint32
	var back, reclaim []Source
	for p := range m.parts {
		pt := &m.parts[p]
		switch {
		case pt.state == PartReleased && pt.since+m.grace < now:
			*pt = partition{}
			forget = append(forget, uint32(p))
		case pt.state == PartReady && pt.copies && !m.provisional(pt, now):
			*pt = partition{state: PartReady}
		case pt.state == PartMoved && pt.back && pt.since+m.settle < now && m.departed[pt.peer]:
			// A puller that came back and went again before this node's
			// gossip heard of it: the mark is stale after all. Its
			// counters are gone with it; the copies it made went to the
			// replicas of its ring, so they are asked for as a dropped
			// mark's are (not this node's own copies alone: it handed
			// its counters to the puller and has none newer).
			peer := pt.peer
			*pt = partition{}
			if m.Owner(uint32(p)) == m.self {
				alive := func(id string) bool { return m.members[id] && !m.departed[id] }
				src := Source{Partition: uint32(p), From: m.takeBackFrom(uint32(p), peer, alive)}
				if m.freshCopies(m.place, uint32(p)) {
					src.Gone = peer
				}
				reclaim = append(reclaim, src)
				m.parts[p] = partition{state: PartPending}
			}
		case pt.state == PartMoved && pt.since+m.settle < now && m.Owner(uint32(p)) == m.self && m.members[pt.peer]:
			back = append(back, Source{Partition: uint32(p), From: []string{pt.peer}})
			*pt = partition{state: PartPending, peer: pt.peer}
		}
	}
	for p, at := range m.dropAt {
		if at > now {
			continue
		}
		delete(m.dropAt, p)
		if m.place == nil || !slices.Contains(m.place[p].Replicas, m.self) {
			drop = append(drop, p)
		}
	}
	slices.Sort(drop)
	var out []Effect
	if len(forget) > 0 {
		out = append(out, DropCounters{Parts: forget})
	}
	if len(drop) > 0 {
		out = append(out, DropReplicas{Parts: drop})
	}
	if len(back) > 0 {
		// Its counters left with the hand-off: if nobody holds them now,
		// replica copies are the best there is.
		out = append(out, Pull{Gain: back, Back: true})
	}
	if len(reclaim) > 0 {
		out = append(out, Pull{Gain: reclaim})
	}
	return out
}

// takeBackFrom is where a partition this node owns is taken back from
// when its puller (peer) is gone or out of the ring: the puller first
// while alive says it is, then the copies the other live replicas of
// this ring hold (a partition none of them has is asked of every live
// member). This node's own copies are older than the counters it handed
// to the puller, unless the puller sent them (Source.Gone).
func (m *Partitions) takeBackFrom(p uint32, peer string, alive func(string) bool) []string {
	others := slices.DeleteFunc(slices.Clone(m.place[p].Replicas), func(id string) bool { return id == m.self })
	return sources(m.self, Move{Partition: p, OldOwner: peer, NewOwner: m.self, OldReplicas: others}, alive)
}

// freshCopies reports whether the copies a gone puller of p sent this
// node are the freshest there are: this node is a replica of p by place
// (the ring the puller replicated by, as far as this node knows). A node
// no longer placed there keeps older copies for Grace, while the puller
// replicated to that ring's replicas since: promoted, they started keys
// from what the puller had decided a while before (the simulator,
// sim/testdata/fixed-takeback-copies.txt, once its gossip heard of a
// member only after its join: n2 took p52 back from n1's copies of
// before n5 joined, while n3 held n1's last ones). Then the take-back
// asks the others (Source.From, and every live member after them).
func (m *Partitions) freshCopies(place []Assignment, p uint32) bool {
	return place != nil && slices.Contains(place[p].Replicas, m.self)
}

// Diff lists the partitions whose owner or replicas differ between two
// placements of the same partition count, in partition order
// (clusterview.Diff compares two rings with it).
func Diff(old, cur []Assignment) []Move {
	var out []Move
	for p := range cur {
		o, n := old[p], cur[p]
		if o.Owner != n.Owner || !slices.Equal(o.Replicas, n.Replicas) {
			out = append(out, Move{Partition: uint32(p), OldOwner: o.Owner, NewOwner: n.Owner, OldReplicas: o.Replicas, NewReplicas: n.Replicas})
		}
	}
	return out
}

func membersOf(place []Assignment) map[string]bool {
	out := map[string]bool{}
	for _, pl := range place {
		if pl.Owner != "" {
			out[pl.Owner] = true
		}
		for _, id := range pl.Replicas {
			out[id] = true
		}
	}
	return out
}

func set(ids []string) map[string]bool {
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// String renders every partition that is not PartNone, one per line, and
// the replica copies waiting to be forgotten: the golden form scenario
// tests compare.
func (m *Partitions) String() string {
	var b strings.Builder
	for p, pt := range m.parts {
		if pt.state == PartNone {
			continue
		}
		fmt.Fprintf(&b, "p%d %s", p, pt.state)
		if pt.peer != "" {
			fmt.Fprintf(&b, " peer=%s", pt.peer)
		}
		if pt.state == PartReleased || pt.state == PartMoved || pt.copies {
			fmt.Fprintf(&b, " since=%d", pt.since)
		}
		if pt.copies {
			b.WriteString(" copies")
		}
		b.WriteByte('\n')
	}
	drops := make([]int, 0, len(m.dropAt))
	for p := range m.dropAt {
		drops = append(drops, int(p))
	}
	sort.Ints(drops)
	for _, p := range drops {
		fmt.Fprintf(&b, "replica p%d forget at %d\n", p, m.dropAt[uint32(p)])
	}
	return b.String()
}
