package replication

import (
	"context"
	"fmt"
	"slices"
)

// PlanResync lists the partitions self owned and still owns whose replica
// list gained a member: those new replicas hold nothing yet (the change
// stream only carries counters that change), so the owner sends them the
// partition's full state. Partitions self gains are not listed: installing
// their pulled or promoted counters already ships them to the new
// replicas. Pure, in the order of moves.
func PlanResync(self string, moves []Move) []uint32 {
	var out []uint32
	for _, m := range moves {
		if m.OldOwner != self || m.NewOwner != self {
			continue
		}
		for _, id := range m.NewReplicas {
			if id != self && id != "" && !slices.Contains(m.OldReplicas, id) {
				out = append(out, m.Partition)
				break
			}
		}
	}
	return out
}

// Resync queues a full copy of a snapshot for the partitions' replicas:
// export reads the live counters (of a few partitions, from the engine)
// and Resync ships them like changes, to every replica the partition has
// at the next flush, in batches of at most MaxBatch.
//
// The copy is ordered with the change stream, so a replica never receives
// an older state of a counter after a newer one: no flush runs between the
// start of export and the end of queuing, and a counter that is already
// waiting in the queue keeps its waiting state (it is the counter's latest
// change, at least as new as the snapshot's). A counter that is not waiting
// has not changed since the last flush, so the snapshot's state is its
// latest.
//
// It returns how many states it queued. When they would not fit in the
// queue (QueueLen) nothing is queued and the error wraps ErrQueueFull:
// retry after a flush. Export runs with flushes held off, so it must be
// quick and must not wait for Run; Enqueue may run meanwhile.
func (r *Replicator) Resync(ctx context.Context, export func(context.Context) ([]State, error)) (int, error) {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	states, err := export(ctx)
	if err != nil {
		return 0, err
	}
	if len(states) == 0 {
		return 0, nil
	}
	since := r.now().UnixNano()
	r.mu.Lock()
	b := r.cur
	if b.n+len(states) > r.cfg.QueueLen {
		n := b.n
		r.mu.Unlock()
		return 0, fmt.Errorf("%w: %d states waiting, %d to resync, room for %d", ErrQueueFull, n, len(states), r.cfg.QueueLen)
	}
	queued := 0
	for i := range states {
		if _, waiting := b.idx[states[i].ID]; waiting {
			continue
		}
		b.push(&states[i], since, r.cfg.QueueLen)
		queued++
	}
	wake := queued > 0 && r.queuedLocked()
	r.mu.Unlock()
	if wake {
		r.wake()
	}
	return queued, nil
}
