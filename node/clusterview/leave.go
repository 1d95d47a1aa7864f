package clusterview

import "time"

// LeaveNoAnswer: while leaving, the members that could take the
// partitions are asked every ProbeEvery whether they answer at all; after
// LeaveNoAnswer without an answer from any, the hand-off is given up.
const LeaveNoAnswer = 2 * time.Second

// Handoff is what a leave watches.
type Handoff interface {
	// Moved reports whether partition p was pulled by its new owner.
	Moved(p uint32) bool
	// OthersInRing reports whether a live member other than this node is
	// in the ring (not leaving): one that can take partitions.
	OthersInRing() bool
	// PeersAnswer reports whether any other member in the ring answers a
	// probe (whatever it answers) within ProbeEvery.
	PeersAnswer() bool
}

// LeaveOutcome is where a graceful leave stands.
type LeaveOutcome int

const (
	StillLeaving LeaveOutcome = iota // partitions are still being pulled
	HandedOff                        // every partition this node owned was pulled
	NoPeers                          // no member is left to pull them
)

func (o LeaveOutcome) String() string {
	return [...]string{"leaving", "handed-off", "no-peers"}[o]
}

// Leave is a graceful leave: it waits until every partition this node
// owned has been pulled, or no member is left to pull them: none in the
// ring (all gone or leaving too), or none has answered for LeaveNoAnswer
// (killed peers that gossip has not declared dead yet, which can take up
// to ~9 s when no member is left to confirm the suspicion). The caller
// steps it on every route change and on a tick (such changes change no
// route), and bounds it with its own deadline.
type Leave struct {
	now        func() time.Time
	owned      []uint32
	lastAnswer time.Time
	nextProbe  time.Time
}

// NewLeave starts a leave of a node that owned partitions owned; now is
// its clock (read again after a probe, which may wait ProbeEvery).
func NewLeave(owned []uint32, now func() time.Time) *Leave {
	t := now()
	return &Leave{now: now, owned: owned, lastAnswer: t, nextProbe: t}
}

// Step looks at h and reports the outcome and how many owned partitions
// are not handed off yet.
func (l *Leave) Step(h Handoff) (LeaveOutcome, int) {
	left := 0
	for _, p := range l.owned {
		if !h.Moved(p) {
			left++
		}
	}
	if left == 0 {
		return HandedOff, 0
	}
	if now := l.now(); !now.Before(l.nextProbe) {
		if h.PeersAnswer() {
			l.lastAnswer = now
		}
		l.nextProbe = now.Add(ProbeEvery)
	}
	if !h.OthersInRing() || l.now().Sub(l.lastAnswer) > LeaveNoAnswer {
		return NoPeers, left
	}
	return StillLeaving, left
}

// Join backoff: the first retry JoinBackoffMin after the first attempt,
// doubling up to JoinBackoffMax.
const (
	JoinBackoffMin = 500 * time.Millisecond
	JoinBackoffMax = 10 * time.Second
)

// JoinAction is what a joining node does next.
type JoinAction int

const (
	JoinWait    JoinAction = iota // alone, the next attempt is not due yet
	JoinAttempt                   // alone and due: try the join addresses
	Joined                        // this node has company
)

func (a JoinAction) String() string {
	return [...]string{"wait", "attempt", "joined"}[a]
}

// Join retries a gossip join with backoff until this node has company: it
// answered a join, or another member joined it meanwhile.
type Join struct {
	wait time.Duration
	next time.Time
}

// NewJoin starts the retries after a first attempt failed at now.
func NewJoin(now time.Time) *Join {
	return &Join{wait: JoinBackoffMin, next: now.Add(JoinBackoffMin)}
}

// Step says what to do at now; alone reports whether this node knows no
// other member.
func (j *Join) Step(now time.Time, alone bool) JoinAction {
	switch {
	case !alone:
		return Joined
	case now.Before(j.next):
		return JoinWait
	}
	return JoinAttempt
}

// Failed records that the attempt Step asked for failed at now and
// returns how long until the next one.
func (j *Join) Failed(now time.Time) time.Duration {
	j.wait = min(2*j.wait, JoinBackoffMax)
	j.next = now.Add(j.wait)
	return j.wait
}
