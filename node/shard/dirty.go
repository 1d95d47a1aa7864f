package shard

import "math/bits"

// dirtySet remembers which counters one batch changed, so each is reported
// once. It replaces a Go map that cost a hash per insert and per delete
// (or a clear proportional to its largest size) on every batch: ids are
// hashes already, so an open-addressing table indexed by the id's bits
// needs no hashing, and bumping gen empties it in O(1).
//
// Owned by the holder of the shard's lock.
type dirtySet struct {
	slots []dirtySlot // len is 0 or a power of two
	gen   uint32      // slots with another gen are empty; never 0 once used
	n     int         // keys in the current generation
}

type dirtySlot struct {
	k   dirtyKey
	gen uint32
}

const minDirtySlots = 64

// add inserts k and reports whether it was missing.
func (d *dirtySet) add(k dirtyKey) bool {
	if 2*(d.n+1) > len(d.slots) {
		d.grow()
	}
	mask := len(d.slots) - 1
	for i := d.home(k.id); ; i = (i + 1) & mask {
		sl := &d.slots[i]
		if sl.gen != d.gen {
			*sl = dirtySlot{k: k, gen: d.gen}
			d.n++
			return true
		}
		if sl.k == k {
			return false
		}
	}
}

// reset empties the set, keeping its memory.
func (d *dirtySet) reset() {
	d.n = 0
	d.gen++
	if d.gen == 0 { // wrapped: old slots could look current
		clear(d.slots)
		d.gen = 1
	}
}

func (d *dirtySet) home(id uint64) int {
	return int((id * 0x9e3779b97f4a7c15) >> (64 - bits.TrailingZeros(uint(len(d.slots)))))
}

// grow doubles the table (at least minDirtySlots), re-adding the current
// generation's keys.
func (d *dirtySet) grow() {
	old, gen := d.slots, d.gen
	d.slots = make([]dirtySlot, max(minDirtySlots, 2*len(old)))
	d.gen, d.n = 1, 0
	for _, sl := range old {
		if sl.gen == gen && gen != 0 {
			d.add(sl.k)
		}
	}
}
