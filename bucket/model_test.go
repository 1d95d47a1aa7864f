package bucket

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Reference models: the algorithms written the obvious way, with exact
// rationals (math/big) and plain slices, to compare Decide against.

type refModel interface {
	decide(cost, now int64) (allowed bool, remaining int64, retry time.Duration)
	refund(cost, now int64)
}

func newRef(l Limit) refModel {
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		return &refBucket{l: l, capacity: l.Capacity()}
	case FixedWindow:
		return &refFixed{l: l, counts: map[int64]int64{}}
	case SlidingWindow:
		return &refSliding{l: l, counts: map[int64]int64{}}
	default:
		return &refLog{l: l}
	}
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ceilRat(r *big.Rat) int64 {
	return -floorRat(new(big.Rat).Neg(r))
}

// refBucket: tokens as a rational, refilled from the last change.
type refBucket struct {
	l        Limit
	capacity int64
	seen     bool
	last     int64
	tokens   *big.Rat
}

func (m *refBucket) at(now int64) (*big.Rat, int64) {
	if !m.seen {
		return rat(m.capacity), now
	}
	eff := max(now, m.last)
	t := new(big.Rat).Add(m.tokens, big.NewRat(0, 1).Mul(rat(eff-m.last), big.NewRat(m.l.Rate, int64(m.l.Period))))
	if t.Cmp(rat(m.capacity)) > 0 {
		t = rat(m.capacity)
	}
	return t, eff
}

func (m *refBucket) decide(cost, now int64) (bool, int64, time.Duration) {
	tok, eff := m.at(now)
	if cost < 0 || cost > m.capacity {
		return false, floorRat(tok), Never
	}
	if tok.Cmp(rat(cost)) < 0 {
		need := new(big.Rat).Sub(rat(cost), tok)
		wait := ceilRat(need.Mul(need, big.NewRat(int64(m.l.Period), m.l.Rate)))
		return false, floorRat(tok), time.Duration(eff - now + wait)
	}
	tok.Sub(tok, rat(cost))
	if cost > 0 {
		m.seen, m.last, m.tokens = true, eff, tok
	}
	return true, floorRat(tok), 0
}

func (m *refBucket) refund(cost, now int64) {
	if !m.seen || cost <= 0 {
		return
	}
	tok, eff := m.at(now)
	tok.Add(tok, rat(cost))
	if tok.Cmp(rat(m.capacity)) > 0 {
		tok = rat(m.capacity)
	}
	m.last, m.tokens = eff, tok
}

// refFixed: a count per aligned window; a clock behind the newest window
// that still has a count uses that window.
type refFixed struct {
	l      Limit
	counts map[int64]int64
	newest int64
	any    bool
}

func (m *refFixed) window(now int64) int64 {
	p := int64(m.l.Period)
	w := now - ((now%p)+p)%p
	if m.any && m.newest > w {
		return m.newest
	}
	return w
}

func (m *refFixed) decide(cost, now int64) (bool, int64, time.Duration) {
	w := m.window(now)
	c := m.counts[w]
	end := time.Duration(w + int64(m.l.Period) - now)
	switch {
	case cost < 0 || cost > m.l.Rate:
		return false, m.l.Rate - c, Never
	case c+cost > m.l.Rate:
		return false, m.l.Rate - c, end
	}
	if cost > 0 {
		// The state remembers one window.
		clear(m.counts)
		m.counts[w] = c + cost
		m.newest, m.any = w, true
	}
	return true, m.l.Rate - c - cost, 0
}

func (m *refFixed) refund(cost, now int64) {
	if cost <= 0 {
		return
	}
	w := m.window(now)
	if m.counts[w] == 0 {
		return // nothing to give back in this window
	}
	c := max(m.counts[w]-cost, 0)
	// The state remembers one window.
	clear(m.counts)
	m.counts[w] = c
	m.newest = w
}

// refSliding: counts per aligned window; the estimate at t is
// prev×(P-e)/P + cur as a rational. A clock behind the newest window with a
// count is read at that window's start.
type refSliding struct {
	l      Limit
	counts map[int64]int64
	newest int64
	any    bool
}

func (m *refSliding) eff(now int64) int64 {
	if m.any && now < m.newest {
		return m.newest
	}
	return now
}

func (m *refSliding) used(t int64) (*big.Rat, int64) {
	p := int64(m.l.Period)
	w := t - ((t%p)+p)%p
	u := big.NewRat(m.counts[w-p]*(p-(t-w)), p)
	return u.Add(u, rat(m.counts[w])), w
}

func (m *refSliding) decide(cost, now int64) (bool, int64, time.Duration) {
	eff := m.eff(now)
	u, w := m.used(eff)
	rem := max(floorRat(new(big.Rat).Sub(rat(m.l.Rate), u)), 0)
	if cost < 0 || cost > m.l.Rate {
		return false, rem, Never
	}
	if new(big.Rat).Add(u, rat(cost)).Cmp(rat(m.l.Rate)) > 0 {
		// Search the first passing instant: binary search over the next two
		// windows (the estimate only falls while nothing is taken).
		p := int64(m.l.Period)
		lo, hi := eff, w+2*p
		for lo < hi {
			mid := lo + (hi-lo)/2
			if u2, _ := m.used(mid); new(big.Rat).Add(u2, rat(cost)).Cmp(rat(m.l.Rate)) <= 0 {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return false, rem, time.Duration(lo - now)
	}
	if cost > 0 {
		m.counts[w] += cost
		m.keep(w)
	}
	return true, floorRat(new(big.Rat).Sub(rat(m.l.Rate), new(big.Rat).Add(u, rat(cost)))), 0
}

func (m *refSliding) refund(cost, now int64) {
	if cost <= 0 {
		return
	}
	_, w := m.used(m.eff(now))
	p := int64(m.l.Period)
	if m.counts[w] == 0 && m.counts[w-p] == 0 {
		return // nothing to give back
	}
	take := min(cost, m.counts[w])
	m.counts[w] -= take
	m.counts[w-p] = max(m.counts[w-p]-(cost-take), 0)
	m.keep(w)
}

// keep forgets all windows but w and the one before: the state holds two.
func (m *refSliding) keep(w int64) {
	p := int64(m.l.Period)
	for k := range m.counts {
		if k != w && k != w-p {
			delete(m.counts, k)
		}
	}
	m.newest, m.any = w, true
}

// refLog: every admitted token's time; count those in (t-P, t].
type refLog struct {
	l     Limit
	times []int64
}

func (m *refLog) count(t int64) int64 {
	var n int64
	for _, x := range m.times {
		if x > t-int64(m.l.Period) && x <= t {
			n++
		}
	}
	return n
}

func (m *refLog) decide(cost, now int64) (bool, int64, time.Duration) {
	eff := now
	if len(m.times) > 0 {
		eff = max(now, m.times[len(m.times)-1])
	}
	n := m.count(eff)
	if cost < 0 || cost > m.l.Rate {
		return false, m.l.Rate - n, Never
	}
	if n+cost > m.l.Rate {
		// Walk forward through expiry instants.
		for _, x := range m.times {
			t := x + int64(m.l.Period)
			if t > eff && m.count(t)+cost <= m.l.Rate {
				return false, m.l.Rate - n, time.Duration(t - now)
			}
		}
		panic("unreachable")
	}
	if cost > 0 {
		// Admitting forgets what expired by then, even if a refund later
		// removes the newest entries.
		m.times = slices.DeleteFunc(m.times, func(x int64) bool { return x <= eff-int64(m.l.Period) })
	}
	for range cost {
		m.times = append(m.times, eff)
	}
	return true, m.l.Rate - n - cost, 0
}

func (m *refLog) refund(cost, _ int64) {
	m.times = m.times[:len(m.times)-int(min(cost, int64(len(m.times))))]
}

// sut is the system under test: State or log, behind one face.
type sut struct {
	l   Limit
	s   State
	log []int64
}

func (u *sut) isLog() bool { return u.l.Algorithm == SlidingLog }

// decide applies a call and checks the invariants every answer must keep.
func (u *sut) decide(t *testing.T, cost, now int64) Result {
	t.Helper()
	var res Result
	if u.isLog() {
		before := slices.Clone(u.log)
		var lg []int64
		lg, res = DecideLog(u.log, u.l, cost, now)
		if (!res.Allowed || cost == 0) && !slices.Equal(lg, before) {
			t.Fatalf("denied/peek DecideLog(%d @%d) changed the log %v -> %v", cost, now, before, lg)
		}
		u.log = lg
	} else {
		var s State
		s, res = Decide(u.s, u.l, cost, now)
		if (!res.Allowed || cost == 0) && s != u.s {
			t.Fatalf("denied/peek Decide(%d @%d) changed the state %+v -> %+v", cost, now, u.s, s)
		}
		u.s = s
	}
	c := u.l.Capacity()
	switch {
	case res.Remaining < 0 || res.Remaining > c:
		t.Fatalf("Decide(%d @%d): remaining %d outside [0,%d]", cost, now, res.Remaining, c)
	case res.Limit != c:
		t.Fatalf("Limit %d, want %d", res.Limit, c)
	case res.Allowed && res.RetryAfter != 0:
		t.Fatalf("allowed with RetryAfter %v", res.RetryAfter)
	case !res.Allowed && (cost < 0 || cost > c) != (res.RetryAfter == Never):
		t.Fatalf("cost %d of %d: RetryAfter %v", cost, c, res.RetryAfter)
	case !res.Allowed && res.RetryAfter != Never && res.RetryAfter <= 0:
		t.Fatalf("denied with RetryAfter %v", res.RetryAfter)
	case res.ResetAfter < 0:
		t.Fatalf("ResetAfter %v", res.ResetAfter)
	}
	return res
}

func (u *sut) refund(cost, now int64) {
	if u.isLog() {
		u.log = RefundLog(u.log, cost)
	} else {
		u.s = Refund(u.s, u.l, cost, now)
	}
}

// peek decides cost on a copy, leaving u alone.
func (u *sut) peek(cost, now int64) Result {
	if u.isLog() {
		_, res := DecideLog(slices.Clone(u.log), u.l, cost, now)
		return res
	}
	_, res := Decide(u.s, u.l, cost, now)
	return res
}

func (u *sut) full(now int64) bool {
	if u.isLog() {
		return FullLog(u.log, u.l, now)
	}
	return Full(u.s, u.l, now)
}

var allAlgorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}

// randomLimit picks a limit with awkward numbers: rates that do not divide
// periods, periods from 1ms to 365 days, bursts above and below the rate.
func randomLimit(r *rand.Rand, alg Algorithm) Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 30 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	l := Limit{Algorithm: alg, Rate: 1 + r.Int64N(50), Period: periods[r.IntN(len(periods))]}
	if r.IntN(3) > 0 {
		l.Burst = 1 + r.Int64N(60)
	}
	return l
}

func TestAgainstReferenceModels(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := range uint64(40) {
				r := rand.New(rand.NewPCG(seed, uint64(alg)))
				l := randomLimit(r, alg)
				u, ref := &sut{l: l}, newRef(l)
				now := t0 + r.Int64N(int64(l.Period))
				seenMax := now
				for i := range 400 {
					switch r.IntN(10) {
					case 0: // clock steps back
						now -= r.Int64N(int64(l.Period))
					case 1, 2: // a long gap
						now += r.Int64N(3 * int64(l.Period))
					default: // about the rate's spacing
						now += r.Int64N(2*int64(l.Period)/l.Rate + 1)
					}
					cost := r.Int64N(l.Capacity()+2) - r.Int64N(2)*r.Int64N(2)
					if r.IntN(8) == 0 {
						k := r.Int64N(l.Capacity() + 1)
						u.refund(k, now)
						ref.refund(k, now)
						continue
					}
					monotone := now >= seenMax
					seenMax = max(seenMax, now)
					res := u.decide(t, cost, now)
					allowed, rem, retry := ref.decide(cost, now)
					if res.Allowed != allowed || res.Remaining != rem || res.RetryAfter != retry {
						t.Fatalf("seed %d step %d %+v cost %d @%d: got %+v, reference says allowed=%v remaining=%d retry=%v",
							seed, i, l, cost, now-t0, res, allowed, rem, retry)
					}
					checkAnswerTimes(t, u, res, cost, now, monotone)
				}
			}
		})
	}
}

// checkAnswerTimes checks that RetryAfter and ResetAfter are exact: the
// same cost passes at now+RetryAfter and not a nanosecond earlier; the state
// is Full at now+ResetAfter and (on a monotone clock) not a nanosecond earlier.
func checkAnswerTimes(t *testing.T, u *sut, res Result, cost, now int64, monotone bool) {
	t.Helper()
	if !res.Allowed && res.RetryAfter > 0 {
		at := now + int64(res.RetryAfter)
		if !u.peek(cost, at).Allowed {
			t.Fatalf("%+v cost %d @%d: denied at now+RetryAfter (%v)", u.l, cost, now-t0, res.RetryAfter)
		}
		if u.peek(cost, at-1).Allowed {
			t.Fatalf("%+v cost %d @%d: allowed before now+RetryAfter (%v)", u.l, cost, now-t0, res.RetryAfter)
		}
	}
	if !u.full(now + int64(res.ResetAfter)) {
		t.Fatalf("%+v @%d: not Full at now+ResetAfter (%v); state %+v log %v", u.l, now-t0, res.ResetAfter, u.s, u.log)
	}
	if monotone && res.ResetAfter > 0 && u.full(now+int64(res.ResetAfter)-1) {
		t.Fatalf("%+v @%d: Full before now+ResetAfter (%v)", u.l, now-t0, res.ResetAfter)
	}
	if res.ResetAfter == 0 && monotone && !u.full(now) {
		t.Fatalf("%+v @%d: ResetAfter 0 but not Full", u.l, now-t0)
	}
}
