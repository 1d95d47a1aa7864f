package bucket

import "time"

// SlidingLog state is a log: one timestamp per admitted token, ascending.
// A token admitted at t counts while t > now-Period. The log holds at most
// Rate live entries; the caller caps Rate (Limit.Validate's maxLog).

// liveFrom returns the index of the first entry still counting at eff.
func liveFrom(log []int64, eff int64, period int64) int {
	cutoff := eff - period
	lo, hi := 0, len(log)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if log[m] <= cutoff {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// logEff is the effective now: a clock behind the newest entry is treated
// as standing at that entry (no time elapsed).
func logEff(log []int64, now int64) int64 {
	if n := len(log); n > 0 && log[n-1] > now {
		return log[n-1]
	}
	return now
}

// DecideLog applies one request of cost tokens at now to a sliding log and
// returns the new log with the answer. The answer is exact: cost passes iff
// the tokens admitted in (now-Period, now] plus cost are at most Rate.
//
// A denied call or a peek (cost 0) returns log itself, untouched. An
// admitted call prunes expired entries and appends cost entries, reusing
// log's backing array when it has room (no allocation in steady state), so
// a caller that must keep the old log has to pass a copy. Burst is ignored;
// an invalid limit blocks (see Decide).
func DecideLog(log []int64, l Limit, cost int64, now int64) ([]int64, Result) {
	if !l.usable() {
		return log, blocked(cost)
	}
	eff := logEff(log, now)
	p := int64(l.Period)
	i := liveFrom(log, eff, p)
	n := int64(len(log) - i)
	res := Result{Limit: l.Rate}
	if n > 0 {
		res.ResetAfter = time.Duration(log[len(log)-1] + p - now)
	}
	switch {
	case cost < 0 || cost > l.Rate:
		res.Remaining = max(l.Rate-n, 0)
		res.RetryAfter = Never
		return log, res
	case n+cost > l.Rate:
		res.Remaining = max(l.Rate-n, 0)
		// The k-th oldest live entry must expire, k = n+cost-rate.
		res.RetryAfter = time.Duration(log[i+int(n+cost-l.Rate)-1] + p - now)
		return log, res
	}
	res.Allowed = true
	res.Remaining = l.Rate - n - cost
	if cost == 0 {
		return log, res
	}
	log = log[:copy(log, log[i:])]
	for range cost {
		log = append(log, eff)
	}
	res.ResetAfter = time.Duration(eff + p - now)
	return log, res
}

// RefundLog gives back up to cost of the most recently admitted tokens.
//
// Removing the newest entries also removes the latest time the log has
// seen. If the clock then steps back (see the clock rules in doc.go), tokens
// whose entries were pruned when those newest ones were admitted are not
// counted again, so up to Rate more may pass in one Period than on a
// steady clock. The log holds nothing else to remember that time by.
func RefundLog(log []int64, cost int64) []int64 {
	if cost <= 0 {
		return log
	}
	return log[:int64(len(log))-min(cost, int64(len(log)))]
}

// FullLog reports whether log at now counts nothing, so the caller may drop it.
func FullLog(log []int64, l Limit, now int64) bool {
	if len(log) == 0 || l.Period <= 0 {
		return true
	}
	return log[len(log)-1] <= now-int64(l.Period)
}
