package shard

import (
	"context"
	"maps"
	"slices"

	"github.com/weirlimit/weir/replication"
)

// Durable counters: a shard hands copies of its long-lived counters to
// Config.OnSnapshot at its own snapshot tick (it owns its map, so nothing
// is locked and no other goroutine reads the tables); writing them out is
// the callee's business, on its own goroutine.

// durable reports whether a stored counter belongs in a snapshot at now:
// not volatile, and idle no earlier than minIdle from now.
func durable(tag uint16, idle, now, minIdle int64) bool {
	return tag&volatileBit == 0 && idle-now >= minIdle
}

// snapshot returns copies of the shard's durable counters at now, in
// partition and then slot (tables) or id (logs) order. It walks the
// deadline arrays (4 bytes a counter) and copies only what qualifies.
func (s *shard) snapshot(now int64) []replication.State {
	var out []replication.State
	pids := slices.Sorted(maps.Keys(s.parts))
	for _, pid := range pids {
		p := s.parts[pid]
		for i, dl := range p.t.dl {
			if dl != 0 && durable(p.t.tags[i], int64(dl)*1e9, now, s.snapMinIdle) {
				out = append(out, p.t.state(pid, i))
			}
		}
		if len(p.logs) == 0 {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(p.logs)) {
			if le := p.logs[id]; durable(le.tag, le.idle, now, s.snapMinIdle) {
				out = append(out, logState(pid, id, le))
			}
		}
	}
	return out
}

// snap runs one snapshot tick: the durable counters go to OnSnapshot.
func (s *shard) snap() {
	s.onSnapshot(s.idx, s.snapshot(s.now()))
}

// Snapshot returns copies of every shard's durable counters now (what
// OnSnapshot would be given at this moment), each shard's part taken
// between two of its batches: the last write before a node leaves.
func (e *Engine) Snapshot(ctx context.Context) ([]replication.State, error) {
	reqs := make([]*request, len(e.shards))
	for i := range reqs {
		reqs[i] = &request{op: opSnapshot}
	}
	if err := e.byShard(ctx, reqs); err != nil {
		return nil, err
	}
	var out []replication.State
	for _, r := range reqs {
		out = append(out, r.states...)
	}
	return out, nil
}
