package replication

import "math"

// State is one counter's state as shipped between nodes: which partition it
// belongs to, the counter id (xxhash64 of rule id + "\x00" + key), the three
// bucket state words and, for sliding_log only, the log of timestamps. All
// timestamps are the owner's clock (unix ns). The package never interprets
// the words.
//
// Idle is the counter's idle deadline (unix ns, the same clock as the
// words): after it the state is certainly fresh again, so whoever holds
// the counter may drop it then and not before. 0 means unknown (a peer
// that does not send it): the receiver keeps the counter for its own
// default. It is absolute, not relative to the sender's now, and moves
// with the words when a receiver corrects for clock skew (node's
// onOurClock), so counter and deadline stay consistent on either side of
// a skew: a relative deadline would, on a receiver whose clock is behind,
// drop a counter whose (absolute) words are not yet refilled.
//
// Volatile marks a counter of a rule with durable: off: it is never
// written to the data dir (node/persist), by its owner or its replicas.
type State struct {
	Partition uint32
	Volatile  bool
	ID        uint64
	A, B, C   int64
	Idle      int64
	Log       []int64
	// Permits, for concurrency counters only, are the permits held
	// (bucket.PermitWords words each: id and expiry). Unlike Log, the
	// clock-skew correction of a hand-off never moves them.
	Permits []int64
}

// Fresh reports whether s is a counter at its initial state: a zero bucket
// state, or a sliding log with no entries. A fresh counter is the same as
// no counter, so there is nothing to keep. Owners send a fresh state when a
// counter idles out, so replicas forget it too.
func (s State) Fresh() bool {
	if s.Log != nil || s.Permits != nil {
		return len(s.Log) == 0 && len(s.Permits) == 0
	}
	return s.A == 0 && s.B == 0 && s.C == 0
}

// LaterIdle returns s's idle deadline moved d ns later (0, unknown, stays 0):
// the deadline's part of moving a state onto a clock d ns ahead.
func (s State) LaterIdle(d int64) int64 {
	if s.Idle == 0 || d <= 0 {
		return s.Idle
	}
	if s.Idle > math.MaxInt64-d {
		return math.MaxInt64
	}
	return s.Idle + d
}
