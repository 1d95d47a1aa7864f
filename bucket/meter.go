package bucket

import "time"

// meter is the shared arithmetic of TokenBucket and LeakyBucket. Both are the
// same continuous bucket of capacity tokens refilled at rate per period; they
// differ only in how the state words store it.
//
// The working quantity is the deficit x: how far the bucket is below full,
// in units of 1/period token (equivalently, nanoseconds of refill × rate).
// x is an exact integer, so there is no rounding and no drift; 0 <= x <=
// capacity×period.
type meter struct {
	capacity uint64
	rate     uint64
	period   uint64
	full     u128 // capacity × period: the deficit of an empty bucket
}

func newMeter(l *Limit, capacity int64) meter {
	m := meter{capacity: uint64(capacity), rate: uint64(l.Rate), period: uint64(l.Period)}
	m.full = mul(m.capacity, m.period)
	return m
}

// decide takes cost tokens from a bucket with deficit x at eff (the
// effective time, >= now) and returns the new deficit with the answer.
func (m meter) decide(x u128, eff int64, cost int64, now int64) (u128, Result) {
	res := Result{Limit: int64(m.capacity)}
	avail := m.full.sub(x) // tokens available × period
	switch {
	case cost < 0 || uint64(cost) > m.capacity:
		res.RetryAfter = Never
	default:
		x2 := x.add(mul(uint64(cost), m.period))
		if !m.full.less(x2) {
			res.Allowed = true
			res.Remaining = m.tokens(m.full.sub(x2))
			res.ResetAfter = m.resetAfter(x2, eff, now)
			return x2, res
		}
		need := x2.sub(m.full)
		res.RetryAfter = time.Duration(eff-now) + time.Duration(sat(need.divCeil(m.rate)))
	}
	res.Remaining = m.tokens(avail)
	res.ResetAfter = m.resetAfter(x, eff, now)
	return x, res
}

// tokens converts a scaled amount to whole tokens (floor).
func (m meter) tokens(a u128) int64 {
	q, _ := a.divmod(m.period)
	return sat(q)
}

// resetAfter is the time from now until deficit x, held at eff, is refilled.
func (m meter) resetAfter(x u128, eff, now int64) time.Duration {
	if x.zero() {
		return 0
	}
	return time.Duration(eff-now) + time.Duration(sat(x.divCeil(m.rate)))
}

// refill lowers deficit x by the refill of elapsed nanoseconds and clamps it
// to an empty bucket (a state written under a larger limit, or garbage, never
// leaves the bucket more than empty).
func (m meter) refill(x u128, elapsed uint64) u128 {
	return min128(x.sub(mul(elapsed, m.rate)), m.full)
}

// TokenBucket state words:
//
//	A  time of the last change (ns); the refill below is counted from it
//	B  whole tokens missing from a full bucket at A
//	C  fraction of a token missing, in 1/period token (0 <= C < period)
//
// Zero value: nothing missing, full.
func (m meter) tokenDeficit(s State, now int64) (x u128, eff int64) {
	if s == (State{}) {
		return u128{}, now
	}
	eff = max(now, s.A)
	x = mul(uint64(max(s.B, 0)), m.period).add64(uint64(max(s.C, 0)))
	return m.refill(x, uint64(eff)-uint64(s.A)), eff
}

func (m meter) tokenState(x u128, eff int64) State {
	q, r := x.divmod(m.period)
	return State{A: eff, B: sat(q), C: int64(r)}
}

// LeakyBucket (GCRA) state words:
//
//	A  theoretical arrival time (TAT), whole nanoseconds
//	B  fraction of a nanosecond of the TAT, in 1/rate ns (0 <= B < rate)
//	C  latest time seen (ns), so a clock going backwards is ignored
//
// The bucket is full when TAT <= now. Zero value: TAT 0, full.
func (m meter) gcraDeficit(s State, now int64) (x u128, eff int64) {
	if s == (State{}) {
		return u128{}, now
	}
	eff = max(now, s.C)
	if s.A < eff {
		return u128{}, eff
	}
	// x = (TAT - eff) × rate, exact.
	x = mul(uint64(s.A)-uint64(eff), m.rate).add64(uint64(max(s.B, 0)))
	return min128(x, m.full), eff
}

func (m meter) gcraState(x u128, eff int64) State {
	q, r := x.divmod(m.rate)
	return State{A: eff + sat(q), B: int64(r), C: eff}
}
