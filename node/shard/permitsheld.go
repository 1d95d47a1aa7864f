package shard

import (
	"context"

	"github.com/weirlimit/weir/bucket"
)

// permitsHeld counts the live permits of the shard's concurrency counters
// by rule. A counter known by its rule's tag only (a state imported by a
// hand-off or a promotion is untagged until its next decision) is not
// counted: the count is what the operators' view shows, not a limit.
func (s *shard) permitsHeld(now int64) map[string]int64 {
	out := map[string]int64{}
	for _, p := range s.parts {
		for _, le := range p.logs {
			if !le.permits {
				continue
			}
			t := ruleOf(le.tag)
			if t == 0 || int(t) >= len(s.tags.names) {
				continue
			}
			if n := bucket.PermitsHeld(le.log, now); n > 0 {
				out[s.tags.names[t]] += n
			}
		}
	}
	return out
}

// PermitsHeld counts the permits held now on this engine's concurrency
// counters, by rule (rule id: the item's Cap.Rule). Each shard counts
// between two of its batches, walking its sliding-log and permit
// counters: it is for an operator's read every few seconds, not for the
// decision path.
func (e *Engine) PermitsHeld(ctx context.Context) (map[string]int64, error) {
	reqs := make([]*request, len(e.shards))
	for i := range reqs {
		reqs[i] = &request{op: opPermits}
	}
	if err := e.byShard(ctx, reqs); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range reqs {
		for rule, n := range r.held {
			out[rule] += n
		}
	}
	return out, nil
}
