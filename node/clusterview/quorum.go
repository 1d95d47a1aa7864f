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

// QuorumSample is how often the node samples Raft's leader for Quorum.
const QuorumSample = 100 * time.Millisecond

// Quorum watches how long this node has known no Raft leader and tells
// when it comes back from being cut off (regained): after QuorumLostAfter
// without a leader, it asks for a probe of the peers every ProbeEvery, and
// once none answered, the first answer (the network is back) or a leader
// known again counts. Raft alone would say so late: the leader backs off
// from a follower it could not reach, up to tens of seconds. After a
// network split, the side that spent it without a leader had no quorum,
// and the other side may have served its partitions meanwhile (see
// Policy). A long election among reachable peers is not a cut: they answer
// throughout, so neither a probe nor the leader known again marks it
// regained (testdata/quorum.txt). A leader known again counts only after a
// probe no peer answered.
//
// Its time is the samples it is given, one every QuorumSample (Tick), as
// the node's watch always counted it: a sample a starved process missed
// (a probe in flight, a loaded machine) counts for nothing, so slowness of
// its own is not taken for a lost quorum. The caller runs the probes it
// asks for (Answered); Quorum reads no clock.
type Quorum struct {
	seen bool          // a leader was known once (startup is not a loss)
	run  time.Duration // the current stretch without a leader, in samples
	cut  bool          // in this stretch, no peer answered
	done bool          // regained already reported in this stretch
}

// Tick takes one sample: whether this node knows a Raft leader. It
// reports probe when the caller should ask the peers whether they answer
// (and report it with Answered), and regained when this node comes back
// from being cut off.
func (q *Quorum) Tick(leader bool) (probe, regained bool) {
	if leader {
		regained = q.run >= QuorumLostAfter && q.cut && !q.done
		q.seen, q.run, q.cut, q.done = true, 0, false, false
		return false, regained
	}
	if !q.seen {
		return false, false
	}
	q.run += QuorumSample
	return q.run >= QuorumLostAfter && !q.done && q.run%ProbeEvery == 0, false
}

// Answered takes the outcome of the probe Tick asked for: whether any peer
// answered. It reports regained for the first answer after a probe no peer
// answered.
func (q *Quorum) Answered(answers bool) (regained bool) {
	switch {
	case !answers:
		q.cut = true
	case q.cut && !q.done:
		q.done = true
		return true
	}
	return false
}

// LeaderlessFor is how long this node has known no Raft leader, counted in
// samples (0 while it knows one, and before it first knew one).
func (q *Quorum) LeaderlessFor() time.Duration { return q.run }
