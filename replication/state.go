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
}
