package bucket

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"
)

// FuzzDecide runs random operation sequences against random limits of every
// algorithm and checks the invariants: 0 <= remaining <= capacity, a denied
// call or a peek changes nothing, RetryAfter and ResetAfter are exact, and
// nothing is admitted past the limit (allowing for what was refunded).
// Invalid limits must simply not panic.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Second), int64(20), []byte{0, 200, 1, 3, 255, 1, 130, 40, 1, 7, 0, 0, 90, 90, 9})
	f.Add(uint8(1), int64(3), int64(time.Second), int64(1), []byte{1, 255, 1, 1, 255, 1, 200, 255, 1, 21, 128, 1})
	f.Add(uint8(2), int64(5), int64(10*time.Second), int64(0), []byte{10, 150, 1, 60, 255, 1, 64, 100, 8, 140, 255, 1})
	f.Add(uint8(3), int64(7), int64(30*time.Second), int64(0), []byte{3, 255, 1, 64, 36, 1, 10, 40, 16, 250, 36, 1, 5, 5, 5})
	f.Add(uint8(4), int64(4), int64(time.Minute), int64(0), []byte{0, 128, 1, 16, 255, 1, 200, 64, 1, 30, 64, 8, 64, 64, 1})
	f.Add(uint8(0), int64(1e9), int64(365*24*time.Hour), int64(0), []byte{1, 255, 1, 1, 1, 1, 64, 255, 1})
	f.Add(uint8(1), int64(1), int64(time.Nanosecond), int64(1<<40), []byte{1, 255, 1, 1, 1, 1, 64, 255, 1})
	f.Add(uint8(3), int64(0), int64(-5), int64(-1), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, alg uint8, rate, period, burst int64, ops []byte) {
		a := Algorithm(alg % 6)
		if a == Concurrency {
			// Permits are taken with TakePermit, never Decide (their own
			// steps: permit_test.go); here 5 stays what it was before
			// them, an unknown algorithm.
			a = Concurrency + 1
		}
		l := Limit{Algorithm: a, Rate: rate, Period: time.Duration(period), Burst: burst}
		if l.Validate(DefaultMaxLog) != nil || l.Period > 365*24*time.Hour || !l.Algorithm.valid() {
			// Must not panic, must not admit a cost it cannot.
			s := State{A: rate, B: period, C: burst}
			ns, res := Decide(s, l, int64(len(ops)), period)
			if res.Allowed && len(ops) > 0 && !l.usable() {
				t.Fatalf("invalid %+v admitted %+v", l, res)
			}
			_ = Refund(ns, l, rate, burst)
			_ = Full(ns, l, rate)
			_, _ = DecideLog([]int64{rate, period}, l, burst, period)
			return
		}
		c := l.Capacity()
		p := int64(l.Period)
		u := &sut{l: l}
		now, latest := t0, int64(math.MinInt64)
		stamp := int64(math.MinInt64)
		var adm []admission
		var refunded int64
		// A log's refund removes its newest entries, and with them the
		// latest time it has seen; a clock behind that time afterwards can
		// recount less than the admissions that entry had pruned
		// (documented on RefundLog). The log bound is checked only
		// without that sequence.
		logRefund, logForgot := false, false
		for i := 0; i+2 < len(ops) && i < 600; i += 3 {
			b0, b1, b2 := ops[i], ops[i+1], ops[i+2]
			if b0 < 128 {
				now += p * int64(b0) / 64
			} else {
				now -= p * int64(b0-128) / 64
			}
			if now < t0-1<<61 || now > t0+1<<61 {
				break // outside the documented clock range
			}
			cost := (c+2)*int64(b1)/255 - 1 // -1 .. c+1
			if b2%8 == 0 {
				k := max(cost, 0)
				before := u.s
				logRefund = logRefund || k > 0
				u.refund(k, now)
				refunded += k
				if u.s != before {
					// A refund applies at the latest time the state has
					// seen and may move it on; later calls are charged
					// no earlier.
					seen := u.s.A
					if l.Algorithm == LeakyBucket {
						seen = u.s.C
					}
					stamp = max(stamp, seen)
				}
				continue
			}
			monotone := now >= latest
			logForgot = logForgot || (logRefund && !monotone)
			latest = max(latest, now)
			if l.Algorithm == SlidingLog {
				// The log charges to max(now, newest entry), and a
				// refund removes the newest entries.
				stamp = math.MinInt64
				if n := len(u.log); n > 0 {
					stamp = u.log[n-1]
				}
			}
			res := u.decide(t, cost, now)
			if res.Allowed && cost > 0 {
				stamp = max(stamp, now)
				adm = append(adm, admission{stamp, cost})
			}
			checkAnswerTimes(t, u, res, cost, now, monotone)
		}
		if len(adm) == 0 {
			return
		}
		// A refund can move a log's newest entry back, so its stamps may
		// not be in order.
		slices.SortStableFunc(adm, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
		switch l.Algorithm {
		case TokenBucket, LeakyBucket:
			// Over the whole run: admitted <= capacity + rate×span/P + refunded.
			var total int64
			for _, a := range adm {
				total += a.cost
			}
			span := uint64(adm[len(adm)-1].at - adm[0].at)
			allowance := mul(uint64(c+refunded), uint64(p)).add(mul(uint64(l.Rate), span))
			if allowance.less(mul(uint64(total), uint64(p))) {
				t.Fatalf("%+v: admitted %d over %v, refunded %d", l, total, time.Duration(span), refunded)
			}
		case SlidingLog:
			if logForgot {
				return
			}
			if got := maxIn(adm, p, false); got > l.Rate+refunded {
				t.Fatalf("%+v: %d admitted within one period, refunded %d", l, got, refunded)
			}
		default:
			perWindow := map[int64]int64{}
			for _, a := range adm {
				perWindow[windowStart(a.at, p)] += a.cost
			}
			for w, n := range perWindow {
				if n > l.Rate+refunded {
					t.Fatalf("%+v: %d admitted in window %d, refunded %d", l, n, w, refunded)
				}
			}
			if got := maxIn(adm, p, false); got > 2*l.Rate+refunded {
				t.Fatalf("%+v: %d admitted within one period, refunded %d", l, got, refunded)
			}
		}
	})
}
