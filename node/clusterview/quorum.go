package clusterview

import "time"

// QuorumLostAfter is how long without a Raft leader counts as cut off from
// the quorum: about the time gossip takes to declare a silent member dead,
// after which the others take over its partitions.
const QuorumLostAfter = 2 * time.Second

// ProbeEvery is how often a node that may be cut off (leaving, or long
// without a Raft leader) asks its peers whether they answer at all, and
// how long it waits for an answer.
const ProbeEvery = 500 * time.Millisecond

// Quorum watches how long this node has known no Raft leader and tells
// when it comes back from being cut off (regained): after QuorumLostAfter
// without a leader, it asks for a probe of the peers every ProbeEvery, and
// once none answered, the first answer (the network is back) or a leader
// known again counts. Raft alone would say so late: the leader backs off
// from a follower it could not reach, up to tens of seconds. After a
// network split, the side that spent it without a leader had no quorum,
// and the other side may have served its partitions meanwhile (see
// Policy). A long election among reachable peers is not a cut: they answer
// throughout (no probe marks it regained; a leader known again after
// QuorumLostAfter or more still does, as before: testdata/quorum.txt).
//
// The caller samples the leader (Step) and runs the probes it asks for
// (Answered); Quorum keeps no clock of its own.
type Quorum struct {
	seen  bool          // a leader was known once (startup is not a loss)
	since time.Time     // when a leader was last known
	run   time.Duration // the current stretch without a leader, at the last Step
	cut   bool          // in this stretch, no peer answered
	done  bool          // regained already reported in this stretch
	next  time.Time     // the next probe
}

// Step records whether this node knows a Raft leader at now. It reports
// probe when the caller should ask the peers whether they answer (and
// report it with Answered), and regained when this node comes back from
// being cut off.
func (q *Quorum) Step(now time.Time, leader bool) (probe, regained bool) {
	if leader {
		regained = q.run >= QuorumLostAfter && !q.done
		q.seen, q.since, q.run, q.cut, q.done, q.next = true, now, 0, false, false, time.Time{}
		return false, regained
	}
	if !q.seen {
		return false, false
	}
	q.run = now.Sub(q.since)
	if q.run >= QuorumLostAfter && !q.done && !now.Before(q.next) {
		q.next = now.Add(ProbeEvery)
		return true, false
	}
	return false, false
}

// Answered takes the outcome of the probe Step asked for, known at now:
// whether any peer answered. The next probe is due ProbeEvery after it (a
// probe that waited out its timeout is not followed at once by another).
// It reports regained for the first answer after a probe no peer answered.
func (q *Quorum) Answered(now time.Time, answers bool) (regained bool) {
	q.next = now.Add(ProbeEvery)
	switch {
	case !answers:
		q.cut = true
	case q.cut && !q.done:
		q.done = true
		return true
	}
	return false
}

// LeaderlessFor is how long this node had known no Raft leader at the
// last Step (0 while it knows one, and before it first knew one).
func (q *Quorum) LeaderlessFor() time.Duration { return q.run }
