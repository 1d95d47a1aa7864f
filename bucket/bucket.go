package bucket

import "time"

// State is the whole per-(rule, key) counter of every algorithm but
// SlidingLog: three words, and the zero value is a fresh (full) bucket.
// What the words mean depends on the algorithm (see doc.go); callers store
// and ship it opaquely.
type State struct{ A, B, C int64 }

// Result is the answer to one Decide.
type Result struct {
	Allowed    bool
	Remaining  int64         // whole tokens left after this call (before it, if denied)
	Limit      int64         // Capacity()
	ResetAfter time.Duration // from now until the state is fresh (Full) again; 0 if it is
	RetryAfter time.Duration // 0 if allowed; exact wait until cost would pass; Never if it never can
}

// Never is the RetryAfter of a request that can never pass: its cost is
// above Capacity(), it is negative, or the limit blocks everything.
const Never time.Duration = -1

// Decide applies one request of cost tokens at now (nanoseconds on any int64
// clock, normally unix nanoseconds) and returns the new state with the
// answer. A denied call or a peek (cost 0) returns s unchanged.
//
// An invalid limit (Rate or Period <= 0) blocks: cost 0 is allowed with 0
// remaining, anything else gets Never. Decide does not serve SlidingLog,
// whose state is a log (DecideLog): it denies with Never.
func Decide(s State, l Limit, cost int64, now int64) (State, Result) {
	if !l.usable() || l.Algorithm == SlidingLog || l.Algorithm == Concurrency || !l.Algorithm.valid() {
		return s, blocked(cost)
	}
	capacity := l.Capacity()
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		m := newMeter(&l, capacity)
		var x u128
		var eff int64
		if l.Algorithm == TokenBucket {
			x, eff = m.tokenDeficit(s, now)
		} else {
			x, eff = m.gcraDeficit(s, now)
		}
		x2, res := m.decide(x, eff, cost, now)
		if !res.Allowed || cost == 0 {
			return s, res
		}
		if l.Algorithm == TokenBucket {
			return m.tokenState(x2, eff), res
		}
		return m.gcraState(x2, eff), res
	case FixedWindow:
		return fixedDecide(s, &l, cost, now)
	default:
		return slidingDecide(s, &l, cost, now)
	}
}

// Refund gives back up to cost tokens taken earlier, as of now. The state
// never goes above capacity (a refund into a full bucket or an empty window
// is lost). A window algorithm gives back from the current window first,
// then from the previous one.
func Refund(s State, l Limit, cost int64, now int64) State {
	if s == (State{}) || !l.usable() || cost <= 0 || l.Algorithm == SlidingLog || !l.Algorithm.valid() {
		return s
	}
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		m := newMeter(&l, l.Capacity())
		var x u128
		var eff int64
		if l.Algorithm == TokenBucket {
			x, eff = m.tokenDeficit(s, now)
		} else {
			x, eff = m.gcraDeficit(s, now)
		}
		x = x.sub(mul(uint64(min(cost, MaxTokens)), m.period))
		if l.Algorithm == TokenBucket {
			return m.tokenState(x, eff)
		}
		return m.gcraState(x, eff)
	case FixedWindow:
		return fixedRefund(s, &l, cost, now)
	default:
		return slidingRefund(s, &l, cost, now)
	}
}

// Full reports whether s at now holds nothing: a full bucket, windows with
// nothing counted. The caller may then drop it (idle expiry) and use the
// zero State instead. (The one thing dropped is the time a full bucket last
// saw, which only matters to a clock behind it and cannot create tokens: a
// full bucket is full at any time.) An invalid limit reports true.
func Full(s State, l Limit, now int64) bool {
	if s == (State{}) || !l.usable() || l.Algorithm == SlidingLog || !l.Algorithm.valid() {
		return true
	}
	switch l.Algorithm {
	case TokenBucket:
		m := newMeter(&l, l.Capacity())
		x, _ := m.tokenDeficit(s, now)
		return x.zero()
	case LeakyBucket:
		m := newMeter(&l, l.Capacity())
		x, _ := m.gcraDeficit(s, now)
		return x.zero()
	case FixedWindow:
		if l.Calendar != nil {
			return calendarRoll(s, &l, now).count == 0
		}
		return fixedRoll(s, &l, now).count == 0
	default:
		w := slidingRoll(s, &l, now)
		return w.cur == 0 && w.prev == 0
	}
}

// blocked is the answer for a limit that admits nothing, or a negative cost.
func blocked(cost int64) Result {
	if cost == 0 {
		return Result{Allowed: true}
	}
	return Result{RetryAfter: Never}
}
