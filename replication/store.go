package replication

import (
	"cmp"
	"errors"
	"fmt"
	"math"
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
	lim   StoreLimits
}

// StoreLimits bound what a Store takes from the wire (0: unbounded), and
// say which copies it indexes as long-lived.
type StoreLimits struct {
	// LongFrom, if set, returns the idle deadline from which an applied
	// copy is long-lived (now plus about an hour: the durable counters a
	// node writes to its data dir). Select then looks at those copies
	// only, not at every copy held, which on a loaded node are mostly
	// counters idling out within seconds. A copy's deadline changes only
	// when it is applied again, so one that was short when applied stays
	// short while LongFrom moves on.
	LongFrom func() int64
	// Partitions is the ring's partition count: a state of a partition
	// at or beyond it is refused (no ring change would ever drop it).
	Partitions uint32
	// MaxStates caps the copies held at once; new counters beyond it are
	// refused (copies of counters already held are still updated).
	MaxStates int
}

// ErrRefused is returned by Apply for states it did not store.
var ErrRefused = errors.New("replica states refused")

type replicaPart struct {
	from   string // the sender of the latest Apply
	states map[uint64]State
	long   map[uint64]struct{} // ids of the long-lived states (StoreLimits.LongFrom)
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{parts: make(map[uint32]*replicaPart)} }

// NewBoundedStore returns an empty Store that refuses what lim excludes.
func NewBoundedStore(lim StoreLimits) *Store {
	return &Store{parts: make(map[uint32]*replicaPart), lim: lim}
}

// Apply stores copies of states received from the owner from. For each
// counter id the last one applied wins: the owner sends a destination one
// batch at a time, so arrival order is change order. A fresh state
// (State.Fresh: the counter idled out or refilled) removes the copy.
// A batch naming a partition out of range is refused whole; new counters
// over MaxStates are left out. Either is reported as ErrRefused.
func (s *Store) Apply(from string, states []State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lim.Partitions > 0 {
		for i := range states {
			if states[i].Partition >= s.lim.Partitions {
				return fmt.Errorf("%w: partition %d out of range (%d partitions)", ErrRefused, states[i].Partition, s.lim.Partitions)
			}
		}
	}
	over := 0
	longFrom := int64(math.MaxInt64)
	if s.lim.LongFrom != nil {
		longFrom = s.lim.LongFrom()
	}
	for i := range states {
		st := states[i]
		if st.Fresh() {
			if p := s.parts[st.Partition]; p != nil {
				if _, ok := p.states[st.ID]; ok {
					delete(p.states, st.ID)
					delete(p.long, st.ID)
					s.n--
				}
				if len(p.states) == 0 {
					delete(s.parts, st.Partition)
				}
			}
			continue
		}
		st.own()
		p := s.parts[st.Partition]
		if p == nil {
			p = &replicaPart{states: make(map[uint64]State)}
			s.parts[st.Partition] = p
		}
		if _, ok := p.states[st.ID]; !ok {
			if s.lim.MaxStates > 0 && s.n >= s.lim.MaxStates {
				over++
				if len(p.states) == 0 {
					delete(s.parts, st.Partition)
				}
				continue
			}
			s.n++
		}
		p.from = from
		p.states[st.ID] = st
		switch {
		case st.Idle >= longFrom:
			if p.long == nil {
				p.long = make(map[uint64]struct{})
			}
			p.long[st.ID] = struct{}{}
		case p.long != nil:
			delete(p.long, st.ID)
		}
	}
	if over > 0 {
		return fmt.Errorf("%w: %d new counters over the cap of %d copies", ErrRefused, over, s.lim.MaxStates)
	}
	return nil
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
			st.own()
		}
		out = append(out, st)
	}
	slices.SortFunc(out[start:], func(a, b State) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Select returns copies of the states held that keep reports true for
// (their Log and Permits slices copied too), in no particular order: the
// durable copies a node writes to its data dir. With StoreLimits.LongFrom
// it looks at the long-lived copies only. keep runs under the Store's
// mutex and must not call the Store.
func (s *Store) Select(keep func(*State) bool) []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []State
	add := func(st State) {
		if keep(&st) {
			st.own()
			out = append(out, st)
		}
	}
	for _, p := range s.parts {
		if s.lim.LongFrom == nil {
			for _, st := range p.states {
				add(st)
			}
			continue
		}
		for id := range p.long {
			add(p.states[id])
		}
	}
	return out
}
