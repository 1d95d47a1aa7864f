package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Partition states, as this node sees them.
const (
	partNone     uint32 = iota // not ours: route by the ring
	partReady                  // ours (or still ours until pulled): decide locally
	partPending                // ours by the ring, waiting for hand-off: forward to the previous holder
	partMoved                  // handed off: forward to the node that pulled it
	partReleased               // not ours by the ring, but its counters are here until the owner pulls them
)

// A node holds a partition's counters (they are the ones to hand off) when
// the partition is ready or released. Holding passes from node to node with
// each hand-off, so at most one live node holds a partition.
func holds(st uint32) bool { return st == partReady || st == partReleased }

// partitionTable holds each partition's state. The check path reads it
// without locks; the cluster loop and hand-off change it.
type partitionTable struct {
	slots []partSlot
}

type partSlot struct {
	state atomic.Uint32
	peer  atomic.Pointer[string] // pending: previous holder; moved: new owner
	pins  atomic.Int32           // checks deciding the partition here (pin)
	since atomic.Int64           // released: when (unix ns)

	mu    sync.Mutex
	ready chan struct{} // closed when a pending partition becomes ready
}

func newPartitionTable(n int) *partitionTable {
	t := &partitionTable{slots: make([]partSlot, n)}
	for i := range t.slots {
		t.slots[i].ready = closedChan()
	}
	return t
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (t *partitionTable) get(p uint32) (uint32, string) {
	s := &t.slots[p]
	st := s.state.Load()
	var peer string
	if ptr := s.peer.Load(); ptr != nil {
		peer = *ptr
	}
	return st, peer
}

func (t *partitionTable) setReady(p uint32) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Store(partReady)
	s.peer.Store(nil)
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

func (t *partitionTable) setPending(p uint32, from string) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.Load() == partPending {
		s.peer.Store(&from)
		return
	}
	s.ready = make(chan struct{})
	s.peer.Store(&from)
	s.state.Store(partPending)
}

// handOff passes p to `to` if this node holds it (marked moved: later items
// go to `to`). Otherwise it reports where p went when this node handed it
// on earlier ("" if it never held p). A partition this node is itself
// still pulling is neither: wait for readyChan first.
func (t *partitionTable) handOff(p uint32, to string) (held bool, movedTo string) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st := s.state.Load(); {
	case holds(st):
		s.peer.Store(&to)
		s.state.Store(partMoved)
		return true, ""
	case st == partMoved:
		if ptr := s.peer.Load(); ptr != nil {
			return false, *ptr
		}
	}
	return false, ""
}

// handBack undoes handOff(p, to) when the counters could not be handed
// over after all (the caller gets an error and installs nothing): this node
// holds p again, ready if it owns p.
func (t *partitionTable) handBack(p uint32, to string, own bool) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	if ptr := s.peer.Load(); s.state.Load() != partMoved || ptr == nil || *ptr != to {
		return
	}
	s.peer.Store(nil)
	if own {
		s.state.Store(partReady)
	} else {
		s.since.Store(time.Now().UnixNano())
		s.state.Store(partReleased)
	}
}

// pin holds off p's hand-off while a check routed here decides it: it
// fails, naming where p went, when p was handed off since the check routed
// it. A hand-off marks p moved and then waits for the pins to go
// (waitUnpinned) before it exports the counters, so every check that saw p
// here is in the export. (Both sides store, then load: with Go's
// sequentially consistent atomics at least one sees the other.)
func (t *partitionTable) pin(p uint32) (ok bool, movedTo string) {
	s := &t.slots[p]
	s.pins.Add(1)
	if s.state.Load() != partMoved {
		return true, ""
	}
	s.pins.Add(-1)
	if ptr := s.peer.Load(); ptr != nil {
		movedTo = *ptr
	}
	return false, movedTo
}

func (t *partitionTable) unpin(p uint32) { t.slots[p].pins.Add(-1) }

// waitUnpinned waits until no check pins p.
// Pins last one shard decision, so it polls.
func (t *partitionTable) waitUnpinned(ctx context.Context, p uint32) error {
	if t.slots[p].pins.Load() == 0 {
		return nil
	}
	tick := time.NewTicker(50 * time.Microsecond)
	defer tick.Stop()
	for t.slots[p].pins.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// release routes p by the ring again when this node served it (it lost p
// in a ring change); its counters stay here until the new owner pulls
// them. A partition still being pulled stays pending: it is settled on
// arrival.
func (t *partitionTable) release(p uint32) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.Load() == partReady {
		s.since.Store(time.Now().UnixNano())
		s.state.Store(partReleased)
		s.peer.Store(nil)
	}
}

// forgetReleased stops holding the partitions released before `before`
// (unix ns) that nobody pulled: their new owner got the counters elsewhere
// (or they are one side's leftovers after a network split), so handing
// them over later could only hand over stale counters. It returns them, for
// the caller to drop from the engine.
func (t *partitionTable) forgetReleased(before int64) []uint32 {
	var out []uint32
	for i := range t.slots {
		s := &t.slots[i]
		if s.state.Load() != partReleased {
			continue
		}
		s.mu.Lock()
		if s.state.Load() == partReleased && s.since.Load() < before {
			s.state.Store(partNone)
			out = append(out, uint32(i))
		}
		s.mu.Unlock()
	}
	return out
}

// arrived settles a pulled partition: ready when this node owns it now,
// otherwise released (holding the counters for whoever pulls them next).
// Either way, waiters for the pull are released.
func (t *partitionTable) arrived(p uint32, own bool) {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case own:
		s.state.Store(partReady)
		s.peer.Store(nil)
	case s.state.Load() == partPending:
		s.since.Store(time.Now().UnixNano())
		s.state.Store(partReleased)
		s.peer.Store(nil)
	}
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// state returns p's state.
func (t *partitionTable) state(p uint32) uint32 { return t.slots[p].state.Load() }

// readyChan returns the channel closed when p is ready.
func (t *partitionTable) readyChan(p uint32) <-chan struct{} {
	s := &t.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (t *partitionTable) pending() int {
	n := 0
	for i := range t.slots {
		if t.slots[i].state.Load() == partPending {
			n++
		}
	}
	return n
}

// clearMoved routes moved partitions by the ring again when their mark is
// stale: stale(p, puller) reports that the node that pulled p is gone (died
// or left) or, by this node's current ring, no longer owns p (it handed p
// on, so forwarding there would reach a node without p's counters).
// Otherwise the mark stays: this node no longer has p's counters, so items
// that peers with an older ring still send here must go on to the puller,
// not be decided on empty counters.
func (t *partitionTable) clearMoved(stale func(p uint32, puller string) bool) {
	for i := range t.slots {
		s := &t.slots[i]
		s.mu.Lock()
		if p := s.peer.Load(); s.state.Load() == partMoved && (p == nil || stale(uint32(i), *p)) {
			s.state.Store(partNone)
			s.peer.Store(nil)
		}
		s.mu.Unlock()
	}
}
