package clusterview

import (
	"sort"
	"sync"
	"time"
)

// The states of a member as membership reports them.
const (
	Alive   = "alive"
	Suspect = "suspect"
	Dead    = "dead" // declared dead: may only be cut off (see Book.LostDue)
	Left    = "left" // left gracefully
)

// Member is one node as membership reports it.
type Member struct {
	ID     string
	Gossip string // gossip address: where a rejoin dials
	State  string // Alive or Suspect while live; Dead or Left once gone
	GRPC   string // where checks, pulls and probes reach it
	HTTP   string
	Raft   string
	// Leaving: handing partitions off; not in the ring.
	Leaving bool
	// Gateways watching rules on this member.
	Gateways uint32
	// Boot identifies this run of the member's process, so a member that
	// comes back after it was declared dead is known to have lived through
	// a network split (same Boot) rather than restarted with no counters (a
	// new Boot).
	Boot  uint64
	Proof string // the member's proof of the gossip keyring (checked by the caller)
	// Features are the rule features the member supports, comma-separated
	// (node's gossip metadata).
	Features string
	// InGroup: the member is in the Raft group's configuration.
	InGroup bool
}

// Book is this node's record of what membership reported: the live
// members, those that departed (dead or left) in the last DepartedFor, the
// ones declared dead (lost) that rejoin attempts go to, the ones that came
// back from a split, and the Raft address gossip last gave for each. It is
// safe for concurrent use (membership callbacks write, the cluster loop
// reads) and holds its lock only inside its own methods; it starts no
// goroutine and reads no clock: every call that needs the time takes it.
type Book struct {
	self     string
	mu       sync.Mutex
	known    map[string]Member    // live members
	departed map[string]departure // dead or left, by id
	lost     map[string]lostMember
	rejoined map[string]bool   // came back from a split since the last ring change
	raftSeen map[string]string // last Raft address gossip gave per id (live or departed)
}

// NewBook returns an empty book for the node self.
func NewBook(self string) *Book {
	return &Book{
		self:     self,
		known:    map[string]Member{},
		departed: map[string]departure{},
		lost:     map[string]lostMember{},
		rejoined: map[string]bool{},
		raftSeen: map[string]string{},
	}
}

// departure is how and when a member left gossip.
type departure struct {
	state string // Dead or Left
	at    time.Time
}

// lostMember is a member gossip declared dead (not one that left).
type lostMember struct {
	gossip string
	boot   uint64
	since  time.Time
	next   time.Time // the next attempt to rejoin it
}

// DepartedFor is how long a departed member is remembered (listed by
// Members, its moved marks cleared, retried if it died). A member gone
// longer is forgotten, so ids that come and go do not pile up.
const DepartedFor = time.Hour

// Reconnecting to members declared dead: every RejoinEvery for
// rejoinFastFor after their death (a network split heals quickly), then
// every rejoinSlowEvery, and not after rejoinFor (an address that stays
// dead may be reused by anything; the cluster label keeps another
// cluster's nodes out anyway).
const (
	RejoinEvery     = 2 * time.Second
	rejoinFastFor   = 2 * time.Minute
	rejoinSlowEvery = 30 * time.Second
	rejoinFor       = 15 * time.Minute
)

// Report records what membership said of m at now: live while m.State is
// Alive or Suspect, gone (Dead or Left) otherwise. A member declared dead
// is lost (rejoin attempts go to it); one that comes back with the Boot it
// had when it was lost lived through a split (see TakeRejoined).
func (b *Book) Report(m Member, now time.Time) {
	gone := m.State == Dead || m.State == Left
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.Raft != "" {
		b.raftSeen[m.ID] = m.Raft
	}
	if gone {
		delete(b.known, m.ID)
		b.departed[m.ID] = departure{m.State, now}
		b.forgetDepartedLocked(now)
		if m.State == Dead && m.ID != b.self {
			b.lost[m.ID] = lostMember{gossip: m.Gossip, boot: m.Boot, since: now}
		}
		return
	}
	b.known[m.ID] = m
	delete(b.departed, m.ID)
	if l, ok := b.lost[m.ID]; ok && l.boot != 0 && l.boot == m.Boot {
		b.rejoined[m.ID] = true // lived through a split: see Policy.splitBase
	}
	delete(b.lost, m.ID)
}

// Drop forgets the live record of member id (one that did not prove it
// is a node), leaving its departure and loss as they were.
func (b *Book) Drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.known, id)
}

func (b *Book) forgetDepartedLocked(now time.Time) {
	for id, d := range b.departed {
		if now.Sub(d.at) > DepartedFor {
			delete(b.departed, id)
		}
	}
	for id := range b.raftSeen {
		_, live := b.known[id]
		_, gone := b.departed[id]
		if !live && !gone {
			delete(b.raftSeen, id)
		}
	}
}

// Live returns a copy of the live members (alive or suspect) by id.
func (b *Book) Live() map[string]Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]Member, len(b.known))
	for id, m := range b.known {
		out[id] = m
	}
	return out
}

// Lookup returns the live member id (alive or suspect), if it is one.
func (b *Book) Lookup(id string) (Member, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.known[id]
	return m, ok
}

// IsDeparted reports whether gossip saw id die or leave (a member not
// heard of yet is not departed).
func (b *Book) IsDeparted(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.departed[id]
	return ok
}

// Departed returns the members gossip saw die or leave recently, with how
// they went (Dead or Left).
func (b *Book) Departed() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.departed))
	for id, d := range b.departed {
		out[id] = d.state
	}
	return out
}

// LeftMembers lists the members that left gracefully, sorted (so the Raft
// leader removes them at once instead of waiting for the voter grace
// period).
func (b *Book) LeftMembers() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, d := range b.departed {
		if d.state == Left {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// TakeRejoined returns the members that came back since the last call
// after gossip had declared them dead, without having restarted.
func (b *Book) TakeRejoined() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.rejoined
	b.rejoined = map[string]bool{}
	return out
}

// LostDue lists, sorted, the gossip addresses of members declared dead
// less than rejoinFor before now that are due for a rejoin attempt, and
// schedules their next one; older ones are forgotten.
func (b *Book) LostDue(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, l := range b.lost {
		age := now.Sub(l.since)
		if age > rejoinFor {
			delete(b.lost, id)
			continue
		}
		if l.gossip == "" || now.Before(l.next) {
			continue
		}
		l.next = now.Add(RejoinEvery)
		if age > rejoinFastFor {
			l.next = now.Add(rejoinSlowEvery)
		}
		b.lost[id] = l
		out = append(out, l.gossip)
	}
	sort.Strings(out)
	return out
}

// PeerGossipAddrs lists, sorted, the gossip addresses of the live members
// but this node.
func (b *Book) PeerGossipAddrs() []string {
	var out []string
	for id, m := range b.Live() {
		if id != b.self && m.Gossip != "" {
			out = append(out, m.Gossip)
		}
	}
	sort.Strings(out)
	return out
}

// RaftAddr is the Raft address gossip last gave for member id. A member
// that died keeps its last address, so Raft keeps dialling where it was.
func (b *Book) RaftAddr(id string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.raftSeen[id]
	return a, ok
}

// OthersInRing reports whether a live member other than this node is in
// the ring (not leaving): one that can take partitions.
func (b *Book) OthersInRing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, m := range b.known {
		if id != b.self && !m.Leaving {
			return true
		}
	}
	return false
}

// ReannounceFor is how long after the last record of this node at another
// address it keeps re-announcing itself (see Reannounce).
const ReannounceFor = 30 * time.Second

// Reannounce reports whether, at now, this node should re-announce itself
// to its peers: gossip last held a record of it at another address at
// conflictAt (zero: never), less than ReannounceFor ago. It came back
// elsewhere (e.g. a rescheduled pod) before the old address was declared
// dead: a push/pull with every member hands them this node's record, which
// they take once the old one is dead.
func Reannounce(now, conflictAt time.Time) bool {
	return !conflictAt.IsZero() && now.Sub(conflictAt) < ReannounceFor
}
