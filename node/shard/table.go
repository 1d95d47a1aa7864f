package shard

import (
	"math/bits"

	"github.com/weirlimit/weir/bucket"
)

// slot is one counter in a table: 40 bytes, no per-slot metadata beyond
// meta, which packs the idle deadline (unix milliseconds, rounded up, in
// the low 48 bits: after it the state is certainly fresh again) and the
// counter's rule tag (high 16 bits, 0: none; see ruleTags). A slot with
// meta == 0 is empty; stored counters always have a deadline >= 1.
type slot struct {
	id   uint64
	s    bucket.State
	meta uint64
}

const (
	tagShift     = 48
	deadlineMask = 1<<tagShift - 1
)

func (sl *slot) deadline() int64 { return int64(sl.meta & deadlineMask) }
func (sl *slot) tag() uint16     { return uint16(sl.meta >> tagShift) }

// packMeta builds a slot's meta from a rule tag and an idle deadline in
// unix ns (rounded up to the millisecond, at least 1).
func packMeta(tag uint16, idle int64) uint64 {
	return uint64(tag)<<tagShift | uint64(deadlineMs(idle))
}

// deadlineMs rounds an idle deadline in ns up to milliseconds, within
// [1, deadlineMask], so a slot is never dropped before its deadline.
func deadlineMs(idle int64) int64 {
	ms := idle / 1e6
	if ms*1e6 < idle {
		ms++
	}
	return min(max(ms, 1), deadlineMask)
}

const (
	slotSize = 40
	// The table grows by half when it would pass 4/5 full, so a grown
	// table is at least 8/15 full: 40/0.8 to 40/0.53 = 50 to 75 bytes
	// per counter.
	maxLoadNum, maxLoadDen = 4, 5
	minTableCap            = 8
	// Allocations above 32 KiB are rounded to 8 KiB pages; sizing tables
	// to the rounded size uses that space instead of wasting it.
	largeAlloc = 32 << 10
	pageSize   = 8 << 10
)

// table is a linear-probing hash table of one partition's counters
// (everything but sliding logs). Go maps would do, but they cost about
// 60-100 bytes per counter here (control bytes, a 7/8 load factor with
// doubling, page rounding of 40 KiB tables); this costs 50-75, never
// shrinks silently and can be walked incrementally by index. Deletion
// shifts later entries back, so there are no tombstones.
type table struct {
	slots []slot
	n     int
}

func (t *table) home(id uint64) int {
	hi, _ := bits.Mul64(id*0x9e3779b97f4a7c15, uint64(len(t.slots)))
	return int(hi)
}

// find returns the index of id, or -1.
func (t *table) find(id uint64) int {
	if t.n == 0 {
		return -1
	}
	for i := t.home(id); ; {
		switch {
		case t.slots[i].meta == 0:
			return -1
		case t.slots[i].id == id:
			return i
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// insert adds a counter that is not in the table yet.
func (t *table) insert(sl slot) {
	if (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(max(minTableCap, len(t.slots)+len(t.slots)/2))
	}
	t.place(sl)
	t.n++
}

func (t *table) place(sl slot) {
	i := t.home(sl.id)
	for t.slots[i].meta != 0 {
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	t.slots[i] = sl
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
		if t.slots[j].meta == 0 {
			break
		}
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		h := t.home(t.slots[j].id)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// resize rehashes into a table of at least capacity slots (0 frees it).
func (t *table) resize(capacity int) {
	if capacity == 0 {
		t.slots = nil
		return
	}
	if b := capacity * slotSize; b > largeAlloc {
		capacity = (b + pageSize - 1) / pageSize * pageSize / slotSize
	}
	old := t.slots
	t.slots = make([]slot, capacity)
	for i := range old {
		if old[i].meta != 0 {
			t.place(old[i])
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
	return (was - len(t.slots)) * slotSize
}
