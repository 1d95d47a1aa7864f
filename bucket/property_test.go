package bucket

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

type admission struct{ at, cost int64 }

// run drives a limit with random traffic and returns what it admitted.
// When back is set the clock sometimes steps back; an admission is then
// stamped max(now, previous stamp), the time the algorithms charge it to
// (no time elapsed), so stamps never decrease. Every call is checked by
// sut.decide; idle expiry is checked along the way.
func run(t *testing.T, r *rand.Rand, l Limit, steps int, back bool) []admission {
	t.Helper()
	u := &sut{l: l}
	now := t0 + r.Int64N(int64(l.Period))
	stamp, lastChange := int64(math.MinInt64), now
	var got []admission
	for range steps {
		switch k := r.IntN(10); {
		case k == 0 && back:
			now -= r.Int64N(2 * int64(l.Period))
		case k <= 1:
			now += r.Int64N(2 * int64(l.Period))
		default:
			now += r.Int64N(int64(l.Period)/l.Rate + 1)
		}
		if !back && now-lastChange >= int64(l.IdleAfter()) && !u.full(now) {
			t.Fatalf("%+v: not Full %v after the last change (IdleAfter %v)", l, time.Duration(now-lastChange), l.IdleAfter())
		}
		cost := 1 + r.Int64N(l.Capacity())
		if r.IntN(3) == 0 {
			cost = 1
		}
		if res := u.decide(t, cost, now); res.Allowed {
			stamp = max(stamp, now)
			got = append(got, admission{stamp, cost})
			lastChange = now
		}
	}
	return got
}

// maxIn returns the most cost admitted in any interval of length span
// (closed at both ends when closed, else (t-span, t]).
func maxIn(adm []admission, span int64, closed bool) int64 {
	var best, sum int64
	j := 0
	for i := range adm {
		sum += adm[i].cost
		for adm[j].at < adm[i].at-span || (!closed && adm[j].at == adm[i].at-span) {
			sum -= adm[j].cost
			j++
		}
		best = max(best, sum)
	}
	return best
}

func TestTokenBucketNeverAboveRate(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		for seed := range uint64(30) {
			r := rand.New(rand.NewPCG(seed, 1))
			l := randomLimit(r, alg)
			adm := run(t, r, l, 400, seed%2 == 1)
			// For every pair of admissions i <= j:
			// sum(cost[i..j]) × P <= burst × P + rate × (t_j - t_i).
			P := big.NewInt(int64(l.Period))
			for i := range adm {
				var sum int64
				for j := i; j < len(adm); j++ {
					sum += adm[j].cost
					lhs := new(big.Int).Mul(big.NewInt(sum), P)
					rhs := new(big.Int).Mul(big.NewInt(l.Capacity()), P)
					rhs.Add(rhs, new(big.Int).Mul(big.NewInt(l.Rate), big.NewInt(adm[j].at-adm[i].at)))
					if lhs.Cmp(rhs) > 0 {
						t.Fatalf("%v seed %d %+v: %d admitted in %v, above burst + rate×T", alg, seed, l, sum, time.Duration(adm[j].at-adm[i].at))
					}
				}
			}
		}
	}
}

func TestWindowsNeverAboveRate(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		for seed := range uint64(30) {
			r := rand.New(rand.NewPCG(seed, 2))
			l := randomLimit(r, alg)
			adm := run(t, r, l, 600, seed%2 == 1)
			p := int64(l.Period)
			if alg == SlidingLog {
				if got := maxIn(adm, p, false); got > l.Rate {
					t.Fatalf("%+v seed %d: %d admitted within one period", l, seed, got)
				}
				continue
			}
			perWindow := map[int64]int64{}
			for _, a := range adm {
				perWindow[windowStart(a.at, p)] += a.cost
			}
			for w, n := range perWindow {
				if n > l.Rate {
					t.Fatalf("%+v seed %d: %d admitted in window %d", l, seed, n, w-t0)
				}
			}
			if got := maxIn(adm, p, false); got > 2*l.Rate {
				t.Fatalf("%+v seed %d: %d admitted within one period", l, seed, got)
			}
		}
	}
}

// TestSlidingWindowEstimate checks the sliding window's admissions against
// its definition with exact rationals: at each admission at t in window w,
// prev×(P-e)/P + (cur including this one) <= rate.
func TestSlidingWindowEstimate(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 3))
		l := randomLimit(r, SlidingWindow)
		adm := run(t, r, l, 600, false)
		p := int64(l.Period)
		count := map[int64]int64{}
		for _, a := range adm {
			w := windowStart(a.at, p)
			count[w] += a.cost
			u := big.NewRat(count[w-p]*(p-(a.at-w)), p)
			u.Add(u, big.NewRat(count[w], 1))
			if u.Cmp(big.NewRat(l.Rate, 1)) > 0 {
				t.Fatalf("%+v seed %d: estimate %v above rate at %d", l, seed, u, a.at-t0)
			}
		}
	}
}

// A client asking at exactly the rate (one token at t0 + ⌈k×P/R⌉) is never
// denied by the buckets, the fixed window or the log, whatever the phase.
func TestExactRateNeverDenied(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingLog} {
		for seed := range uint64(30) {
			r := rand.New(rand.NewPCG(seed, 4))
			l := randomLimit(r, alg)
			if l.Capacity() == 1 && int64(l.Period)%l.Rate != 0 {
				// With room for one token, gaps rounded to whole
				// nanoseconds (some shorter than Period/Rate) are
				// refused: there is nowhere to keep the excess.
				l.Burst = 2
			}
			u := &sut{l: l}
			start := t0 + r.Int64N(int64(l.Period))
			P := big.NewInt(int64(l.Period))
			for k := range 5*l.Rate + 3 {
				off := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(k), P), big.NewInt(l.Rate))
				now := start + ceilRat(off)
				if res := u.decide(t, 1, now); !res.Allowed {
					t.Fatalf("%+v seed %d: request %d at the rate denied: %+v", l, seed, k, res)
				}
			}
		}
	}
}

// The sliding window's estimate makes an exact-rate client lose requests
// around window starts (the previous window weighs fully there); it still
// gets at least rate-1 per window in steady state.
func TestSlidingWindowAtRate(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 5))
		l := randomLimit(r, SlidingWindow)
		u := &sut{l: l}
		p := int64(l.Period)
		start := t0 + r.Int64N(p)
		perWindow := map[int64]int64{}
		const windows = 6
		for k := range windows * l.Rate {
			now := start + ceilRat(big.NewRat(0, 1).Mul(big.NewRat(k, l.Rate), big.NewRat(p, 1)))
			if u.decide(t, 1, now).Allowed {
				perWindow[windowStart(now, p)]++
			}
		}
		first := windowStart(start, p)
		for w := first + p; w < first+(windows-1)*p; w += p {
			if n := perWindow[w]; n < l.Rate-1 || n > l.Rate {
				t.Errorf("%+v seed %d: %d admitted in window %d at the rate", l, seed, n, (w-first)/p)
			}
		}
	}
}

// A clock stepping back never makes more available than the latest time
// seen: nothing allowed at the earlier time is denied at the later one.
func TestClockBackCreatesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, 6))
			l := randomLimit(r, alg)
			u := &sut{l: l}
			now := t0
			latest := now
			for range 300 {
				now = latest + r.Int64N(int64(l.Period)/l.Rate+1)
				if r.IntN(5) == 0 {
					now -= r.Int64N(2 * int64(l.Period))
				}
				latest = max(latest, now)
				cost := r.Int64N(l.Capacity() + 1)
				back := latest - r.Int64N(3*int64(l.Period))
				if rb, rl := u.peek(0, back), u.peek(0, latest); rb.Remaining > rl.Remaining {
					t.Fatalf("%+v seed %d: at %d (back) %+v, at %d (latest) %+v", l, seed, back-t0, rb, latest-t0, rl)
				}
				if rb, rl := u.peek(cost, back), u.peek(cost, latest); rb.Allowed && !rl.Allowed {
					t.Fatalf("%+v seed %d: cost %d at %d (back) %+v, at %d (latest) %+v", l, seed, cost, back-t0, rb, latest-t0, rl)
				}
				u.decide(t, cost, now)
			}
		}
	}
}

// Refunds never go above capacity, and taking then refunding the same cost
// at the same instant changes nothing visible.
func TestRefund(t *testing.T) {
	for _, alg := range allAlgorithms {
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, 7))
			l := randomLimit(r, alg)
			u := &sut{l: l}
			now := t0
			for range 200 {
				now += r.Int64N(int64(l.Period)/l.Rate + 1)
				cost := 1 + r.Int64N(l.Capacity())
				before := u.peek(1, now)
				if res := u.decide(t, cost, now); res.Allowed {
					u.refund(cost, now)
					if after := u.peek(1, now); after.Remaining != before.Remaining || after.Allowed != before.Allowed {
						t.Fatalf("%+v seed %d: take+refund %d: remaining %d -> %d", l, seed, cost, before.Remaining, after.Remaining)
					}
					u.decide(t, cost, now)
				}
				if r.IntN(10) == 0 {
					v := &sut{l: l, s: u.s, log: append([]int64(nil), u.log...)}
					v.refund(1<<40, now)
					if got := v.peek(0, now); got.Remaining != l.Capacity() || !v.full(now) {
						t.Fatalf("%+v seed %d: after a huge refund remaining %d, want %d", l, seed, got.Remaining, l.Capacity())
					}
				}
			}
		}
	}
}

func TestStateSize(t *testing.T) {
	if n := unsafe.Sizeof(State{}); n > 24 {
		t.Fatalf("State is %d bytes, want <= 24", n)
	}
}

// Huge numbers: rate 1e9 per 365 days, and 1 per 365 days with a large
// burst, must not overflow.
func TestHugeLimits(t *testing.T) {
	year := 365 * 24 * time.Hour
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		l := Limit{Algorithm: alg, Rate: 1e9, Period: year, Burst: 1e9}
		if err := l.Validate(0); err != nil {
			t.Fatal(err)
		}
		s, res := Decide(State{}, l, 1e9, t0)
		if !res.Allowed || res.Remaining != 0 || res.ResetAfter != year {
			t.Fatalf("%v: %+v", alg, res)
		}
		// One token every 31,536,000 ns.
		if _, res := Decide(s, l, 1, t0); res.RetryAfter != 31_536_000 {
			t.Fatalf("%v: retry %v", alg, res.RetryAfter)
		}
		if _, res := Decide(s, l, 0, t0+int64(year)/2); res.Remaining != 5e8 {
			t.Fatalf("%v: half a year later %+v", alg, res)
		}
		if !Full(s, l, t0+int64(year)) || Full(s, l, t0+int64(year)-1) {
			t.Fatalf("%v: not full exactly a year later", alg)
		}
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		l := Limit{Algorithm: alg, Rate: 1e9, Period: year}
		s, res := Decide(State{}, l, 1e9-1, t0)
		if !res.Allowed || res.Remaining != 1 {
			t.Fatalf("%v: %+v", alg, res)
		}
		if _, res := Decide(s, l, 2, t0); res.Allowed || res.RetryAfter <= 0 {
			t.Fatalf("%v: %+v", alg, res)
		}
	}
}
