package bucket

import "time"

// Concurrency limits the requests in flight at once: a Limit with
// Algorithm Concurrency allows Rate permits held at the same time, each for
// at most Period (the permit TTL) unless it is released first. Its state is
// a permit list: PermitWords int64 words per held permit, the permit's
// 128-bit id and the time it expires (on the owner's clock). The list is
// kept apart from the bucket words and from sliding logs: the clock-skew
// correction of a hand-off (Later, LaterLog) never moves it, so a permit
// never outlives its TTL by the skew of the nodes it crossed.

// PermitWords is the number of int64 words one permit takes in a permit
// list: its id (high, low) and its expiry (unix ns).
const PermitWords = 3

// PermitID is a permit's 128-bit id.
type PermitID struct{ Hi, Lo uint64 }

// Zero reports whether id is the zero id (no permit).
func (id PermitID) Zero() bool { return id == PermitID{} }

// TakePermit applies one acquisition at now to the permit list ps: it drops
// the permits that expired (expiry ≤ now) and, when fewer than l.Rate are
// held and cost > 0, appends id expiring at now + l.Period. Cost 0 peeks.
// Remaining is the permits still free; RetryAfter, when denied, is the time
// until the earliest held permit expires (a release may come sooner);
// ResetAfter the time until the last one expires. It may reuse ps's
// storage; the returned list is the new state.
func TakePermit(ps []int64, l Limit, id PermitID, cost int64, now int64) ([]int64, Result) {
	if !l.usable() || l.Algorithm != Concurrency {
		return ps, blocked(cost)
	}
	ps = dropExpired(ps, now)
	held := int64(len(ps) / PermitWords)
	res := Result{Limit: l.Rate, Remaining: max(l.Rate-held, 0), ResetAfter: untilLast(ps, now)}
	switch {
	case cost < 0:
		res.RetryAfter = Never
		return ps, res
	case cost > 0 && held >= l.Rate:
		res.RetryAfter = untilFirst(ps, now)
		return ps, res
	}
	res.Allowed = true
	if cost == 0 {
		return ps, res
	}
	exp := satAdd(now, int64(l.Period))
	ps = append(ps, int64(id.Hi), int64(id.Lo), exp)
	res.Remaining--
	res.ResetAfter = max(res.ResetAfter, time.Duration(exp-now))
	return ps, res
}

// ReleasePermit drops the expired permits of ps at now and then the one
// named id, reporting whether it was held (false: it had expired, was
// released already, or never existed). Other permits are untouched.
func ReleasePermit(ps []int64, id PermitID, now int64) ([]int64, bool) {
	ps = dropExpired(ps, now)
	for i := 0; i+PermitWords <= len(ps); i += PermitWords {
		if uint64(ps[i]) == id.Hi && uint64(ps[i+1]) == id.Lo {
			return append(ps[:i], ps[i+PermitWords:]...), true
		}
	}
	return ps, false
}

// PermitsHeld is the number of permits of ps live at now.
func PermitsHeld(ps []int64, now int64) int64 {
	n := int64(0)
	for i := 0; i+PermitWords <= len(ps); i += PermitWords {
		if ps[i+2] > now {
			n++
		}
	}
	return n
}

// PermitExpiry is when permit id of ps expires (0: not held).
func PermitExpiry(ps []int64, id PermitID) int64 {
	for i := 0; i+PermitWords <= len(ps); i += PermitWords {
		if uint64(ps[i]) == id.Hi && uint64(ps[i+1]) == id.Lo {
			return ps[i+2]
		}
	}
	return 0
}

// dropExpired removes, in place, the permits that expired at now (and any
// trailing partial permit), keeping the others in order.
func dropExpired(ps []int64, now int64) []int64 {
	out := ps[:0]
	for i := 0; i+PermitWords <= len(ps); i += PermitWords {
		if ps[i+2] > now {
			out = append(out, ps[i:i+PermitWords]...)
		}
	}
	return out
}

func untilFirst(ps []int64, now int64) time.Duration {
	first := int64(-1)
	for i := 2; i < len(ps); i += PermitWords {
		if first < 0 || ps[i] < first {
			first = ps[i]
		}
	}
	if first < 0 {
		return 0
	}
	return time.Duration(first - now)
}

func untilLast(ps []int64, now int64) time.Duration {
	last := now
	for i := 2; i < len(ps); i += PermitWords {
		last = max(last, ps[i])
	}
	return time.Duration(last - now)
}

// DecideAbove is Decide for a request that must leave floor tokens in the
// bucket (a reserve kept for other classes of requests): it takes cost
// only when cost + floor would pass. shed reports a request refused for
// the floor alone (cost alone would have passed); its RetryAfter is the
// wait until cost + floor would pass. floor ≤ 0 is Decide.
func DecideAbove(s State, l Limit, cost, floor int64, now int64) (State, Result, bool) {
	if floor <= 0 || cost <= 0 {
		ns, r := Decide(s, l, cost, now)
		return ns, r, false
	}
	_, probe := Decide(s, l, cost+floor, now)
	ns, r := Decide(s, l, cost, now)
	if probe.Allowed || !r.Allowed {
		return ns, r, false
	}
	// Shed: cost alone would pass; nothing is taken.
	r.Allowed, r.RetryAfter = false, probe.RetryAfter
	if probe.RetryAfter < 0 {
		r.RetryAfter = Never
	}
	return s, r, true
}
