// Package hotkeys is a bounded space-saving sketch (Metwally, Agrawal and
// El Abbadi, 2005): it tracks the heaviest keys of a stream in a fixed
// number of slots, whatever the number of distinct keys. It is pure: no
// goroutines, no clock, no locks; its owner serializes calls.
//
// Invariants: at most Capacity keys are held; a held key's Count never
// undercounts its true weight and overcounts it by at most its Err; any
// key whose true weight exceeds total/Capacity is held.
package hotkeys

import (
	"container/heap"
	"slices"
	"strings"
)

// Sketch is a space-saving sketch over string keys. The zero value is not
// usable; call New.
type Sketch struct {
	cap   int
	index map[string]int // key → position in heap
	heap  entries        // min-heap by count
	total uint64
}

// Entry is one tracked key: Count is its estimated weight, at most Err
// above the true one.
type Entry struct {
	Key   string
	Count uint64
	Err   uint64
}

type entries []Entry

// New returns a sketch holding up to capacity keys (at least 1).
func New(capacity int) *Sketch {
	capacity = max(capacity, 1)
	return &Sketch{cap: capacity, index: make(map[string]int, capacity), heap: make(entries, 0, capacity)}
}

// Add counts w more for key. A key not held replaces the lightest one and
// inherits its count as its error bound. The key is copied when stored, so
// callers may pass strings that alias reused memory.
func (s *Sketch) Add(key string, w uint64) {
	if w == 0 {
		return
	}
	s.total += w
	if i, ok := s.index[key]; ok {
		s.heap[i].Count += w
		s.fix(i)
		return
	}
	key = strings.Clone(key)
	if len(s.heap) < s.cap {
		s.index[key] = len(s.heap)
		s.heap = append(s.heap, Entry{Key: key, Count: w})
		s.fix(len(s.heap) - 1)
		return
	}
	min := s.heap[0]
	delete(s.index, min.Key)
	s.heap[0] = Entry{Key: key, Count: min.Count + w, Err: min.Count}
	s.index[key] = 0
	s.fix(0)
}

// Total is the weight added since New or the last Reset.
func (s *Sketch) Total() uint64 { return s.total }

// Len is the number of keys held.
func (s *Sketch) Len() int { return len(s.heap) }

// Top returns up to n held entries, heaviest first (ties by key).
func (s *Sketch) Top(n int) []Entry {
	out := slices.Clone(s.heap)
	slices.SortFunc(out, func(a, b Entry) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Reset forgets every key.
func (s *Sketch) Reset() {
	clear(s.index)
	s.heap = s.heap[:0]
	s.total = 0
}

// heap plumbing through container/heap, keeping index in step.
type hview struct{ s *Sketch }

func (h hview) Len() int           { return len(h.s.heap) }
func (h hview) Less(i, j int) bool { return h.s.heap[i].Count < h.s.heap[j].Count }
func (h hview) Swap(i, j int) {
	e := h.s.heap
	e[i], e[j] = e[j], e[i]
	h.s.index[e[i].Key] = i
	h.s.index[e[j].Key] = j
}
func (h hview) Push(any)    { panic("hotkeys: unused") }
func (h hview) Pop() any    { panic("hotkeys: unused") }
func (s *Sketch) fix(i int) { heap.Fix(hview{s}, i) }
func (s *Sketch) up(i int)  { heap.Fix(hview{s}, i) }
