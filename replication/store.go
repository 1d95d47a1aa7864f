package replication

import (
	"cmp"
	"slices"
	"sync"
)

// Store holds the replica copies this node received from partition owners,
// until they are promoted (Take), served to a new owner (Peek) or forgotten
// (Drop). It is safe for concurrent use: Apply runs on gRPC handler
// goroutines, the rest on the node's ring goroutine, and none of it is on a
// check's path, so one mutex guards the map.
type Store struct {
	mu    sync.Mutex
	parts map[uint32]*replicaPart
	n     int
}

type replicaPart struct {
	from   string // the sender of the latest Apply
	states map[uint64]State
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{parts: make(map[uint32]*replicaPart)} }

// Apply stores copies of states received from the owner from. For each
// counter id the last one applied wins: the owner sends a destination one
// batch at a time, so arrival order is change order. A fresh state
// (State.Fresh: the counter idled out or refilled) removes the copy.
func (s *Store) Apply(from string, states []State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range states {
		st := states[i]
		if st.Fresh() {
			if p := s.parts[st.Partition]; p != nil {
				if _, ok := p.states[st.ID]; ok {
					delete(p.states, st.ID)
					s.n--
				}
				if len(p.states) == 0 {
					delete(s.parts, st.Partition)
				}
			}
			continue
		}
		st.Log = copyLog(nil, st.Log)
		p := s.parts[st.Partition]
		if p == nil {
			p = &replicaPart{states: make(map[uint64]State)}
			s.parts[st.Partition] = p
		}
		p.from = from
		if _, ok := p.states[st.ID]; !ok {
			s.n++
		}
		p.states[st.ID] = st
	}
}

// Take removes the partitions' copies and returns them, ordered by the
// partitions given and then by counter id. Each returned State is the
// caller's to keep.
func (s *Store) Take(partitions []uint32) []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []State
	for _, pid := range partitions {
		p := s.parts[pid]
		if p == nil {
			continue
		}
		out = appendSorted(out, p.states, false)
		s.n -= len(p.states)
		delete(s.parts, pid)
	}
	return out
}

// Peek returns copies of the partitions' states without removing them, in
// the same order as Take; a partition listed twice is returned once.
func (s *Store) Peek(partitions []uint32) []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []State
	for i, pid := range partitions {
		p := s.parts[pid]
		if p == nil || slices.Contains(partitions[:i], pid) {
			continue
		}
		out = appendSorted(out, p.states, true)
	}
	return out
}

// Drop forgets the partitions' copies.
func (s *Store) Drop(partitions []uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range partitions {
		if p := s.parts[pid]; p != nil {
			s.n -= len(p.states)
			delete(s.parts, pid)
		}
	}
}

// From returns the node that last sent states for the partition.
func (s *Store) From(partition uint32) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[partition]; p != nil {
		return p.from, true
	}
	return "", false
}

// Len returns the number of counter states held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Partitions returns the number of partitions with at least one state.
func (s *Store) Partitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts)
}

func appendSorted(out []State, m map[uint64]State, copyLogs bool) []State {
	start := len(out)
	for _, st := range m {
		if copyLogs {
			st.Log = copyLog(nil, st.Log)
		}
		out = append(out, st)
	}
	slices.SortFunc(out[start:], func(a, b State) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
