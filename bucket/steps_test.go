package bucket

import (
	"testing"
	"time"
)

// t0 is a unix-nanosecond instant aligned to every period used below.
const t0 = int64(1_700_000_000) * int64(time.Second)

const (
	ns  = int64(1)
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

// step is one call at t0+at. A step with refund > 0 refunds instead of
// deciding (and checks nothing else).
type step struct {
	at        int64
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
	refund    int64
}

func runSteps(t *testing.T, l Limit, steps []step) {
	t.Helper()
	if err := l.Validate(DefaultMaxLog); err != nil {
		t.Fatal(err)
	}
	var s State
	var lg []int64
	for i, st := range steps {
		now := t0 + st.at
		if st.refund > 0 {
			if l.Algorithm == SlidingLog {
				lg = RefundLog(lg, st.refund)
			} else {
				s = Refund(s, l, st.refund, now)
			}
			continue
		}
		var res Result
		if l.Algorithm == SlidingLog {
			lg, res = DecideLog(lg, l, st.cost, now)
		} else {
			s, res = Decide(s, l, st.cost, now)
		}
		want := Result{Allowed: st.allowed, Remaining: st.remaining, Limit: l.Capacity(), RetryAfter: st.retry, ResetAfter: st.reset}
		if res != want {
			t.Errorf("step %d (at %v, cost %d):\n got %+v\nwant %+v", i, time.Duration(st.at), st.cost, res, want)
		}
	}
}

func TestTokenBucketSteps(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			// 10 per second, bucket of 20: one token every 100ms.
			runSteps(t, Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 20}, []step{
				{at: 0, cost: 0, allowed: true, remaining: 20},
				{at: 0, cost: 20, allowed: true, remaining: 0, reset: 2 * time.Second},
				{at: 0, cost: 1, remaining: 0, retry: 100 * time.Millisecond, reset: 2 * time.Second},
				{at: 100*ms - 1, cost: 1, remaining: 0, retry: 1, reset: 1900*time.Millisecond + 1},
				{at: 100 * ms, cost: 1, allowed: true, remaining: 0, reset: 2 * time.Second},
				{at: 100 * ms, cost: 21, remaining: 0, retry: Never, reset: 2 * time.Second},
				{at: 100 * ms, cost: -1, remaining: 0, retry: Never, reset: 2 * time.Second},
				{at: 1100 * ms, cost: 0, allowed: true, remaining: 10, reset: time.Second},
				// Clock 1.2s behind the state's last change: no time elapsed;
				// the wait includes catching up with it.
				{at: -1100 * ms, cost: 1, remaining: 0, retry: 1300 * time.Millisecond, reset: 3200 * time.Millisecond},
				{at: 1150 * ms, cost: 10, allowed: true, remaining: 0, reset: 2*time.Second - 50*time.Millisecond},
				{at: 1150 * ms, refund: 4},
				{at: 1150 * ms, cost: 0, allowed: true, remaining: 4, reset: 1600*time.Millisecond - 50*time.Millisecond},
				{at: 1150 * ms, refund: 100},
				{at: 1150 * ms, cost: 0, allowed: true, remaining: 20},
				{at: 10 * sec, cost: 20, allowed: true, remaining: 0, reset: 2 * time.Second},
			})
		})
	}
}

func TestTokenBucketFractionalRate(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			// 3 per second: a token every 333,333,333⅓ ns.
			runSteps(t, Limit{Algorithm: alg, Rate: 3, Period: time.Second}, []step{
				{at: 0, cost: 3, allowed: true, remaining: 0, reset: time.Second},
				{at: 333_333_333, cost: 1, remaining: 0, retry: 1, reset: 666_666_667},
				{at: 333_333_334, cost: 1, allowed: true, remaining: 0, reset: 1_000_000_000 - 333_333_334 + 333_333_334},
				// At 1s: 3 refilled, 4 taken, one missing.
				{at: sec, cost: 0, allowed: true, remaining: 2, reset: 333_333_334},
				{at: sec, cost: 3, remaining: 2, retry: 333_333_334, reset: 333_333_334},
				// No drift: 3000 periods later, exactly full; 3 pass, the 4th waits.
				{at: 3000 * sec, cost: 3, allowed: true, remaining: 0, reset: time.Second},
				{at: 3000 * sec, cost: 1, remaining: 0, retry: 333_333_334, reset: time.Second},
			})
		})
	}
}

func TestLeakyBucketEvenSpacing(t *testing.T) {
	// Burst 1: strictly one every 250ms, whatever the demand.
	runSteps(t, Limit{Algorithm: LeakyBucket, Rate: 4, Period: time.Second, Burst: 1}, []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 250 * time.Millisecond},
		{at: 1, cost: 1, remaining: 0, retry: 250*time.Millisecond - 1, reset: 250*time.Millisecond - 1},
		{at: 250 * ms, cost: 1, allowed: true, remaining: 0, reset: 250 * time.Millisecond},
		{at: 300 * ms, cost: 1, remaining: 0, retry: 200 * time.Millisecond, reset: 200 * time.Millisecond},
		{at: 500 * ms, cost: 2, remaining: 1, retry: Never, reset: 0},
		{at: 10 * sec, cost: 1, allowed: true, remaining: 0, reset: 250 * time.Millisecond},
	})
}

func TestFixedWindowSteps(t *testing.T) {
	// 5 per 10s; windows start at multiples of 10s (t0 is one).
	runSteps(t, Limit{Algorithm: FixedWindow, Rate: 5, Period: 10 * time.Second, Burst: 99}, []step{
		{at: sec, cost: 0, allowed: true, remaining: 5},
		{at: sec, cost: 3, allowed: true, remaining: 2, reset: 9 * time.Second},
		{at: 2 * sec, cost: 3, remaining: 2, retry: 8 * time.Second, reset: 8 * time.Second},
		{at: 2 * sec, cost: 2, allowed: true, remaining: 0, reset: 8 * time.Second},
		{at: 10*sec - 1, cost: 1, remaining: 0, retry: 1, reset: 1},
		{at: 10 * sec, cost: 5, allowed: true, remaining: 0, reset: 10 * time.Second},
		{at: 10 * sec, cost: 6, remaining: 0, retry: Never, reset: 10 * time.Second},
		// Back into the previous window: still the state's window, still full.
		{at: 5 * sec, cost: 1, remaining: 0, retry: 15 * time.Second, reset: 15 * time.Second},
		{at: 12 * sec, refund: 2},
		{at: 12 * sec, cost: 2, allowed: true, remaining: 0, reset: 8 * time.Second},
		{at: 30 * sec, cost: 0, allowed: true, remaining: 5},
		// A refund into a window that rolled away is lost.
		{at: 30 * sec, cost: 1, allowed: true, remaining: 4, reset: 10 * time.Second},
		{at: 40 * sec, refund: 1},
		{at: 40 * sec, cost: 5, allowed: true, remaining: 0, reset: 10 * time.Second},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	// 10 per 10s.
	runSteps(t, Limit{Algorithm: SlidingWindow, Rate: 10, Period: 10 * time.Second}, []step{
		{at: 5 * sec, cost: 10, allowed: true, remaining: 0, reset: 15 * time.Second},
		// Next window, e=0: previous window weighs fully (10).
		{at: 10 * sec, cost: 1, remaining: 0, retry: time.Second, reset: 10 * time.Second},
		// e=1s: 10×9/10 = 9 used.
		{at: 11 * sec, cost: 1, allowed: true, remaining: 0, reset: 19 * time.Second},
		// e=2s: 10×8/10 + 1 = 9 used.
		{at: 12 * sec, cost: 1, allowed: true, remaining: 0, reset: 18 * time.Second},
		// 8 + 2 + 1 > 10; passes when 10×(10-e)/10 <= 7, e = 3s.
		{at: 12 * sec, cost: 1, remaining: 0, retry: time.Second, reset: 18 * time.Second},
		// 8 more passes once the 2 of this window are all that weighs: t0+20s.
		{at: 12 * sec, cost: 8, remaining: 0, retry: 8 * time.Second, reset: 18 * time.Second},
		{at: 20*sec - 1, cost: 8, remaining: 7, retry: 1, reset: 10*time.Second + 1},
		{at: 20 * sec, cost: 8, allowed: true, remaining: 0, reset: 20 * time.Second},
		// e=5s: 2×5/10 + 8 = 9 used; 1 left, remaining is floored.
		{at: 25 * sec, cost: 0, allowed: true, remaining: 1, reset: 15 * time.Second},
		{at: 25*sec + 1, cost: 0, allowed: true, remaining: 1, reset: 15*time.Second - 1},
		{at: 25 * sec, cost: 11, remaining: 1, retry: Never, reset: 15 * time.Second},
		// 10 needs both windows gone: t0+40s.
		{at: 25 * sec, cost: 10, remaining: 1, retry: 15 * time.Second, reset: 15 * time.Second},
		// Clock back 20s: read at the state's window start, e=0: 2 + 8 used.
		{at: 5 * sec, cost: 1, remaining: 0, retry: 20 * time.Second, reset: 35 * time.Second},
		{at: 25 * sec, refund: 9},
		{at: 25 * sec, cost: 0, allowed: true, remaining: 9, reset: 5 * time.Second},
		{at: 60 * sec, cost: 10, allowed: true, remaining: 0, reset: 20 * time.Second},
	})
}

func TestSlidingLogSteps(t *testing.T) {
	// 3 per 10s, exact.
	runSteps(t, Limit{Algorithm: SlidingLog, Rate: 3, Period: 10 * time.Second}, []step{
		{at: 0, cost: 2, allowed: true, remaining: 1, reset: 10 * time.Second},
		{at: 4 * sec, cost: 1, allowed: true, remaining: 0, reset: 10 * time.Second},
		// Needs the two tokens of t0 to expire.
		{at: 5 * sec, cost: 2, remaining: 0, retry: 5 * time.Second, reset: 9 * time.Second},
		{at: 10*sec - 1, cost: 1, remaining: 0, retry: 1, reset: 4*time.Second + 1},
		{at: 10 * sec, cost: 2, allowed: true, remaining: 0, reset: 10 * time.Second},
		{at: 10 * sec, cost: 4, remaining: 0, retry: Never, reset: 10 * time.Second},
		// Clock back: read at the newest entry; the t0+4s token goes first.
		{at: 3 * sec, cost: 1, remaining: 0, retry: 11 * time.Second, reset: 17 * time.Second},
		{at: 10 * sec, refund: 1},
		{at: 10 * sec, cost: 1, allowed: true, remaining: 0, reset: 10 * time.Second},
		{at: 20 * sec, cost: 0, allowed: true, remaining: 3},
	})
}

func TestInvalidLimitBlocks(t *testing.T) {
	for _, l := range []Limit{{}, {Rate: 10}, {Period: time.Second}, {Algorithm: SlidingLog, Rate: 1, Period: time.Second}, {Algorithm: 9, Rate: 1, Period: time.Second}} {
		s := State{A: 1, B: 2, C: 3}
		ns, res := Decide(s, l, 1, t0)
		if ns != s || res != (Result{RetryAfter: Never}) {
			t.Errorf("%+v: Decide = %+v, %+v; want unchanged, Never", l, ns, res)
		}
		if _, res := Decide(s, l, 0, t0); !res.Allowed || res.Remaining != 0 {
			t.Errorf("%+v: peek = %+v", l, res)
		}
		if got := Refund(s, l, 5, t0); got != s {
			t.Errorf("%+v: Refund changed the state to %+v", l, got)
		}
	}
	if lg, res := DecideLog(nil, Limit{Algorithm: SlidingLog}, 1, t0); lg != nil || res.RetryAfter != Never {
		t.Errorf("DecideLog on zero limit = %v, %+v", lg, res)
	}
}

// A state written under a larger limit (a rule edit) counts as at most
// empty under the new one.
func TestLimitShrinks(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		big := Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 100}
		small := Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 10}
		s, _ := Decide(State{}, big, 100, t0)
		_, res := Decide(s, small, 1, t0)
		want := Result{Limit: 10, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second}
		if res != want {
			t.Errorf("%v: %+v, want %+v", alg, res, want)
		}
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		big := Limit{Algorithm: alg, Rate: 100, Period: time.Second}
		small := Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		s, _ := Decide(State{}, big, 100, t0)
		if _, res := Decide(s, small, 0, t0); res.Allowed != true || res.Remaining != 0 {
			t.Errorf("%v: %+v", alg, res)
		}
		// The next window sees at most the new rate as the previous count.
		if _, res := Decide(s, small, 0, t0+sec+sec/2); alg == SlidingWindow && res.Remaining != 5 {
			t.Errorf("%v: half into the next window %+v", alg, res)
		}
	}
}
