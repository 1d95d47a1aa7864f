package bucket

import "time"

// FixedWindow state words:
//
//	A  start of the window the count belongs to (ns; a multiple of Period
//	   for a state started fresh, see fixedRoll)
//	B  tokens taken in that window (0 after a refund: A still marks the
//	   latest window seen)
//	C  the window's length in ns for a calendar limit (its windows differ
//	   in length: months, days across a daylight-saving change); 0 for a
//	   Period window, whose length is the limit's
//
// Start and length both live in the state, so a state moved onto a
// reader's clock by Later (which moves A) keeps its count until the same
// instant its writer would, whatever the reader's zone database says.
type fixedWin struct {
	start  int64 // window start
	length int64 // C: calendar window length, 0 for a Period window
	count  int64 // tokens taken in it
}

// end is when the window ends.
func (w fixedWin) end(l *Limit) int64 {
	if w.length > 0 {
		return satAdd(w.start, w.length)
	}
	return w.start + int64(l.Period)
}

// state is w holding count tokens.
func (w fixedWin) state(count int64) State {
	return State{A: w.start, B: count, C: w.length}
}

// fixedRoll brings s to now. A clock that went back into an earlier window
// stays in the state's window (no time elapsed).
//
// A fresh state starts on the period's grid. After that the state keeps
// its own grid: a window ends Period after its start, and the next starts
// there. A start off the grid (a state written under another limit, or
// read on a clock ahead of its writer's, see Later) thus keeps its count
// until its own window ends.
//
// A calendar limit's state keeps its window until start + length (C); a
// state without a length (written under a Period limit) keeps it until
// the end of the calendar window holding its start. The next window is
// the calendar window holding now (calendarRoll).
func fixedRoll(s State, l *Limit, now int64) fixedWin {
	p := int64(l.Period)
	if s == (State{}) {
		return fixedWin{start: windowStart(now, p)}
	}
	if now < s.A+p { // same window, or a clock gone back
		return fixedWin{start: s.A, count: min(max(s.B, 0), l.Rate)}
	}
	return fixedWin{start: s.A + (now-s.A)/p*p}
}

// calendarRoll is fixedRoll for a limit with a Calendar (kept apart, and
// chosen by each caller, so that fixedRoll stays small enough to inline on
// the Period path).
func calendarRoll(s State, l *Limit, now int64) fixedWin {
	if !l.calendar() { // an unknown unit: Period windows
		return fixedRoll(s, l, now)
	}
	if s != (State{}) {
		end := satAdd(s.A, s.C)
		if s.C <= 0 {
			_, end = l.Calendar.Unit.window(s.A, l.Calendar.Zone)
		}
		if now < end {
			return fixedWin{start: s.A, length: end - s.A, count: min(max(s.B, 0), l.Rate)}
		}
	}
	start, end := l.Calendar.Unit.window(now, l.Calendar.Zone)
	return fixedWin{start: start, length: end - start}
}

func fixedDecide(s State, l *Limit, cost int64, now int64) (State, Result) {
	var w fixedWin
	if l.Calendar != nil {
		w = calendarRoll(s, l, now)
	} else {
		w = fixedRoll(s, l, now)
	}
	end := time.Duration(w.end(l) - now) // window end, from now
	res := Result{Limit: l.Rate}
	if w.count > 0 {
		res.ResetAfter = end
	}
	switch {
	case cost < 0 || cost > l.Rate:
		res.Remaining = l.Rate - w.count
		res.RetryAfter = Never
		return s, res
	case w.count+cost > l.Rate:
		res.Remaining = l.Rate - w.count
		res.RetryAfter = end
		return s, res
	}
	res.Allowed = true
	res.Remaining = l.Rate - w.count - cost
	if cost == 0 {
		return s, res
	}
	res.ResetAfter = end
	return w.state(w.count + cost), res
}

func fixedRefund(s State, l *Limit, cost int64, now int64) State {
	var w fixedWin
	if l.Calendar != nil {
		w = calendarRoll(s, l, now)
	} else {
		w = fixedRoll(s, l, now)
	}
	if w.count == 0 {
		return s // nothing left to give back; keep the window seen
	}
	return w.state(max(w.count-cost, 0))
}

// SlidingWindow state words:
//
//	A  start of the current window (ns; as for FixedWindow)
//	B  tokens taken in the current window
//	C  tokens taken in the previous window [A-Period, A)
//
// At now, with e = now - A, the estimated use of the sliding window
// (now-Period, now] is C×(Period-e)/Period + B: the previous window counts in
// proportion to its overlap, as if its tokens had been spread evenly.
type slidingWin struct {
	start     int64 // current window start
	cur, prev int64
	eff       int64 // effective now (>= now), start <= eff < start+Period
}

// slidingRoll brings s to now. A clock that went back into an earlier window
// stays at the start of the state's window (no time elapsed; the previous
// window then weighs fully, which is the most conservative reading).
func slidingRoll(s State, l *Limit, now int64) slidingWin {
	p := int64(l.Period)
	if s == (State{}) {
		return slidingWin{start: windowStart(now, p), eff: now}
	}
	eff := max(now, s.A)
	cur, prev := min(max(s.B, 0), l.Rate), min(max(s.C, 0), l.Rate)
	// The state keeps its own grid, as in fixedRoll.
	switch e := eff - s.A; {
	case e < p:
		return slidingWin{start: s.A, cur: cur, prev: prev, eff: eff}
	case e < 2*p:
		return slidingWin{start: s.A + p, prev: cur, eff: eff}
	default:
		return slidingWin{start: s.A + e/p*p, eff: eff}
	}
}

// weighted is prev × (Period - e): the previous window's share, × Period.
func (w slidingWin) weighted(p uint64, e uint64) u128 {
	return mul(uint64(w.prev), p-e)
}

func slidingDecide(s State, l *Limit, cost int64, now int64) (State, Result) {
	w := slidingRoll(s, l, now)
	p := uint64(l.Period)
	e := uint64(w.eff) - uint64(w.start)
	rateP := mul(uint64(l.Rate), p)
	// used = prev×(P-e) + cur×P, in tokens × Period.
	used := w.weighted(p, e).add(mul(uint64(w.cur), p))
	res := Result{Limit: l.Rate, ResetAfter: w.resetAfter(l, now)}
	remaining := func(used u128) int64 {
		q, _ := rateP.sub(used).divmod(p)
		return sat(q)
	}
	if cost < 0 || cost > l.Rate {
		res.Remaining = remaining(used)
		res.RetryAfter = Never
		return s, res
	}
	used2 := used.add(mul(uint64(cost), p))
	if rateP.less(used2) {
		res.Remaining = remaining(used)
		res.RetryAfter = time.Duration(w.passAt(l, cost) - now)
		return s, res
	}
	res.Allowed = true
	res.Remaining = remaining(used2)
	if cost == 0 {
		return s, res
	}
	w.cur += cost
	res.ResetAfter = w.resetAfter(l, now)
	return State{A: w.start, B: w.cur, C: w.prev}, res
}

// resetAfter is the time from now until both counts have rolled out.
func (w slidingWin) resetAfter(l *Limit, now int64) time.Duration {
	switch {
	case w.cur > 0:
		return time.Duration(w.start-now) + 2*l.Period
	case w.prev > 0:
		return time.Duration(w.start-now) + l.Period
	}
	return 0
}

// passAt is the earliest time (on the state's clock) at which cost tokens
// pass, for a cost that does not pass at w.eff and is at most Rate.
func (w slidingWin) passAt(l *Limit, cost int64) int64 {
	p := uint64(l.Period)
	// Later in this window: prev×(P-e) <= (rate-cur-cost)×P, i.e.
	// e >= P - floor((rate-cur-cost)×P/prev).
	if free := l.Rate - w.cur - cost; free >= 0 && w.prev > 0 {
		if k, _ := mul(uint64(free), p).divmod(uint64(w.prev)); k > 0 && k < p {
			return w.start + int64(p-k)
		}
	}
	// In the next window the current count becomes the previous one:
	// cur×(P-e) <= (rate-cost)×P. At the window after that, both are 0.
	next := w.start + int64(p)
	if w.cur == 0 {
		return next
	}
	k, _ := mul(uint64(l.Rate-cost), p).divmod(uint64(w.cur))
	if k >= p {
		return next
	}
	return next + int64(p-k)
}

func slidingRefund(s State, l *Limit, cost int64, now int64) State {
	w := slidingRoll(s, l, now)
	if w.cur == 0 && w.prev == 0 {
		return s // nothing left to give back; keep the window seen
	}
	take := min(cost, w.cur)
	w.cur -= take
	w.prev = max(w.prev-(cost-take), 0)
	return State{A: w.start, B: w.cur, C: w.prev}
}
