package shard

import (
	"math/rand/v2"
	"testing"

	"github.com/weirlimit/weir/bucket"
)

// The table agrees with a Go map under random inserts, updates, removals
// (including removals during an index walk, as the sweep does) and shrinks.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tb table
	ref := map[uint64]int64{}
	for step := range 200_000 {
		id := rng.Uint64N(3000) // small id space: many collisions and reuses
		switch op := rng.IntN(10); {
		case op < 5:
			if i := tb.find(id); i >= 0 {
				tb.slots[i].s.A++
				ref[id]++
			} else {
				tb.insert(id, bucket.State{A: 1}, 1, 0)
				ref[id] = 1
			}
		case op < 8:
			if i := tb.find(id); i >= 0 {
				tb.remove(i)
				delete(ref, id)
			} else if _, ok := ref[id]; ok {
				t.Fatalf("step %d: %d lost", step, id)
			}
		case op < 9:
			// Walk and drop every odd counter, re-examining a slot after
			// a removal like sweepPart does.
			for i := 0; i < len(tb.slots); {
				if sl := tb.slots[i]; sl.s != (bucket.State{}) && sl.s.A%2 == 1 {
					delete(ref, sl.id)
					tb.remove(i)
					continue
				}
				i++
			}
		default:
			tb.shrink()
		}
		if tb.n != len(ref) {
			t.Fatalf("step %d: table has %d, map %d", step, tb.n, len(ref))
		}
	}
	for id, a := range ref {
		i := tb.find(id)
		if i < 0 || tb.slots[i].s.A != a {
			t.Fatalf("id %d: index %d, want A=%d", id, i, a)
		}
	}
	live := 0
	for _, sl := range tb.slots {
		if sl.s != (bucket.State{}) {
			live++
			if _, ok := ref[sl.id]; !ok {
				t.Fatalf("stale id %d in table", sl.id)
			}
		}
	}
	if live != len(ref) {
		t.Fatalf("%d live slots, want %d", live, len(ref))
	}
	if tb.n*maxLoadDen > len(tb.slots)*maxLoadNum {
		t.Fatalf("load %d/%d above max", tb.n, len(tb.slots))
	}
}
