package shard

import (
	"math/bits"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/replication"
)

// slot is one counter's id and state in a table: 32 bytes. A slot whose
// state is the zero State is empty (a fresh counter is never stored).
type slot struct {
	id uint64
	s  bucket.State
}

// The rest of a counter lives in the table's parallel arrays, 6 bytes:
// its idle deadline (dl: unix seconds, rounded up, at least 1: after it
// the state is certainly fresh again) and its rule tag (tags: 0 none; see
// ruleTags). Seconds in a uint32 reach 2106; a later deadline is kept at
// the largest value, so a counter is never dropped early.

// deadlineSec rounds an idle deadline in ns up to whole seconds, within
// [1, MaxUint32], so a slot is never dropped before its deadline.
func deadlineSec(idle int64) uint32 {
	s := idle / 1e9
	if s*1e9 < idle {
		s++
	}
	return uint32(min(max(s, 1), 1<<32-1))
}

const (
	slotSize = 32
	// Bytes a counter costs in all: its slot, deadline and tag.
	entrySize = slotSize + 4 + 2
	// The table grows by half when it would pass 4/5 full, so a grown
	// table is at least 8/15 full: 38/0.8 to 38/0.53 = 48 to 71 bytes
	// per counter.
	maxLoadNum, maxLoadDen = 4, 5
	minTableCap            = 8
	// Allocations above 32 KiB are rounded to 8 KiB pages; sizing the slot
	// array to the rounded size uses that space instead of wasting it.
	largeAlloc = 32 << 10
	pageSize   = 8 << 10
)

// table is a linear-probing hash table of one partition's counters
// (everything but sliding logs). Go maps would do, but they cost about
// 60-100 bytes per counter here (control bytes, a 7/8 load factor with
// doubling, page rounding of 40 KiB tables); this costs 48-71 (about 60
// at 1M keys over 1024 partitions), never shrinks silently and can be
// walked incrementally by index. Deletion shifts later entries back, so
// there are no tombstones. Lookups touch only slots; the deadline and tag
// arrays are read when a counter is stored, touched or swept.
type table struct {
	slots []slot
	dl    []uint32 // idle deadline by slot, unix seconds (0: empty)
	tags  []uint16 // rule tag by slot
	n     int
}

func (t *table) home(id uint64) int {
	hi, _ := bits.Mul64(id*0x9e3779b97f4a7c15, uint64(len(t.slots)))
	return int(hi)
}

// used reports whether slot i holds a counter.
func (t *table) used(i int) bool { return t.slots[i].s != (bucket.State{}) }

// find returns the index of id, or -1.
func (t *table) find(id uint64) int {
	if t.n == 0 {
		return -1
	}
	for i := t.home(id); ; {
		switch sl := &t.slots[i]; {
		case sl.s == (bucket.State{}):
			return -1
		case sl.id == id:
			return i
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// insert adds a counter that is not in the table yet; s must not be the
// zero State. idle is its idle deadline in unix ns.
func (t *table) insert(id uint64, s bucket.State, idle int64, tag uint16) {
	if (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(max(minTableCap, len(t.slots)+len(t.slots)/2))
	}
	t.place(slot{id: id, s: s}, deadlineSec(idle), tag)
	t.n++
}

func (t *table) place(sl slot, dl uint32, tag uint16) {
	i := t.home(sl.id)
	for t.used(i) {
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	t.slots[i], t.dl[i], t.tags[i] = sl, dl, tag
}

// remove deletes the slot at i, shifting back the entries of its probe run
// so that lookups never stop early; afterwards slot i holds the next entry
// to examine (or is empty).
func (t *table) remove(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		if !t.used(j) {
			break
		}
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		h := t.home(t.slots[j].id)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i], t.dl[i], t.tags[i] = t.slots[j], t.dl[j], t.tags[j]
			i = j
		}
	}
	t.slots[i], t.dl[i], t.tags[i] = slot{}, 0, 0
	t.n--
}

// state is slot i's counter as shipped: its words, its idle deadline (the
// whole second the slot keeps, in ns) and whether it is volatile.
func (t *table) state(pid uint32, i int) replication.State {
	sl := &t.slots[i]
	return replication.State{Partition: pid, ID: sl.id, A: sl.s.A, B: sl.s.B, C: sl.s.C,
		Idle: int64(t.dl[i]) * 1e9, Volatile: t.tags[i]&volatileBit != 0}
}

// resize rehashes into a table of at least capacity slots (0 frees it).
func (t *table) resize(capacity int) {
	if capacity == 0 {
		t.slots, t.dl, t.tags = nil, nil, nil
		return
	}
	if b := capacity * slotSize; b > largeAlloc {
		capacity = (b + pageSize - 1) / pageSize * pageSize / slotSize
	}
	old, oldDl, oldTags := t.slots, t.dl, t.tags
	t.slots, t.dl, t.tags = make([]slot, capacity), make([]uint32, capacity), make([]uint16, capacity)
	for i := range old {
		if old[i].s != (bucket.State{}) {
			t.place(old[i], oldDl[i], oldTags[i])
		}
	}
}

// shrink gives memory back once the table is at most a quarter full; it
// returns the bytes of table it let go.
func (t *table) shrink() int {
	was := len(t.slots)
	switch {
	case t.n == 0:
		t.resize(0)
	case len(t.slots) > minTableCap && t.n*4 <= len(t.slots):
		t.resize(max(minTableCap, t.n*2))
	}
	return (was - len(t.slots)) * entrySize
}
