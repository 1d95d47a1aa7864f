package shard

import (
	"context"
	"maps"
	"slices"

	"github.com/weirlimit/weir/replication"
)

// Durable counters: Snapshot asks every shard for copies of its
// long-lived counters; each shard builds its part on its own goroutine
// between two batches (it owns its map, so nothing is locked and no other
// goroutine reads the tables). Writing them out is the caller's business,
// on its own goroutine (node/persist).

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
	// A slot's deadline is whole seconds, rounded up: durable when at
	// least minSec (and not 0, an empty slot).
	minSec := uint32(min(max((now+s.snapMinIdle)/1e9, 1), 1<<32-1))
	pids := slices.Sorted(maps.Keys(s.parts))
	for _, pid := range pids {
		p := s.parts[pid]
		for i, dl := range p.t.dl {
			if dl >= minSec && p.t.tags[i]&volatileBit == 0 {
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

// Snapshot returns copies of every shard's durable counters: those not
// Item.Volatile whose idle deadline is at least Config.SnapshotMinIdle
// away. Each shard's part is taken between two of its batches, on its
// goroutine, and is a consistent view of that shard. The states are the
// caller's.
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
