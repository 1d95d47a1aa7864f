package replication

// inbox is one generation of changes waiting for the next flush: a FIFO ring
// of distinct counter ids in order of their first change, coalesced in place
// (newest state wins, the first change's time stays), bounded by a maximum
// length beyond which the oldest id is evicted.
//
// It is not safe for concurrent use; the Replicator guards the current
// generation with its mutex and Run owns the spare one.
type inbox struct {
	idx     map[uint64]uint64 // counter id -> sequence number of its slot
	buf     []slot            // ring; len(buf) is the capacity
	head    int               // index in buf of the oldest slot
	n       int               // live slots
	headSeq uint64            // sequence number of buf[head]
}

type slot struct {
	st    State
	since int64 // unix ns of the first change not yet shipped
}

func newInbox() *inbox { return &inbox{idx: make(map[uint64]uint64)} }

func (b *inbox) at(i int) *slot { return &b.buf[(b.head+i)%len(b.buf)] }

// push adds or replaces s, copying its Log, and reports whether the oldest
// entry had to be evicted to make room.
func (b *inbox) push(s *State, since int64, maxLen int) (evicted bool) {
	if seq, ok := b.idx[s.ID]; ok {
		sl := b.at(int(seq - b.headSeq))
		keep, keepPermits := sl.st.Log, sl.st.Permits // owned by this inbox alone until the flush: reuse them
		sl.st = *s
		sl.st.Log = copyLog(keep, s.Log)
		sl.st.Permits = copyLog(keepPermits, s.Permits)
		return false
	}
	if b.n == len(b.buf) {
		if len(b.buf) < maxLen {
			b.grow(maxLen)
		} else {
			old := &b.buf[b.head]
			delete(b.idx, old.st.ID)
			*old = slot{}
			b.head = (b.head + 1) % len(b.buf)
			b.headSeq++
			b.n--
			evicted = true
		}
	}
	seq := b.headSeq + uint64(b.n)
	sl := b.at(b.n)
	b.n++
	sl.st = *s
	sl.st.own()
	sl.since = since
	b.idx[s.ID] = seq
	return evicted
}

func (b *inbox) grow(maxLen int) {
	c := min(max(64, 2*len(b.buf)), maxLen)
	nb := make([]slot, c)
	for i := 0; i < b.n; i++ {
		nb[i] = *b.at(i)
	}
	b.buf, b.head = nb, 0
}

// oldest is the time of the oldest unshipped change, 0 when empty.
func (b *inbox) oldest() int64 {
	if b.n == 0 {
		return 0
	}
	return b.buf[b.head].since
}

// reset empties the generation, keeping its memory but dropping every Log
// reference (those now belong to the destinations' queues).
func (b *inbox) reset() {
	for i := 0; i < b.n; i++ {
		*b.at(i) = slot{}
	}
	clear(b.idx)
	b.head, b.n, b.headSeq = 0, 0, 0
}

// own gives s slices of its own (Log and Permits copied), so it may be
// kept while the ones it was given are reused.
func (s *State) own() {
	s.Log = copyLog(nil, s.Log)
	s.Permits = copyLog(nil, s.Permits)
}

func copyLog(dst, src []int64) []int64 {
	if len(src) == 0 {
		return nil
	}
	return append(dst[:0], src...)
}
