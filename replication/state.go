package replication

// State is one counter's state as shipped between nodes: which partition it
// belongs to, the counter id (xxhash64 of rule id + "\x00" + key), the three
// bucket state words and, for sliding_log only, the log of timestamps. All
// timestamps are the owner's clock (unix ns). The package never interprets
// the words.
type State struct {
	Partition uint32
	ID        uint64
	A, B, C   int64
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
