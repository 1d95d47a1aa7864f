package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A state read on a clock d ahead through Later never holds more than the
// writer's state at the same instant, for every algorithm, and admits no
// more over the following requests (spanning several periods: a window
// keeps the state's own grid); without Later, the reader ahead would see d
// more refill (checked for TokenBucket, where d × rate is a token or more).
func TestLaterGrantsNothingExtra(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow} {
		for range 300 {
			l := Limit{Algorithm: alg, Rate: 1 + r.Int64N(50), Period: time.Duration(1+r.Int64N(5)) * time.Second}
			l.Burst = l.Rate + r.Int64N(20)
			// The writer spends at random for a while.
			var s State
			now := t0 + r.Int64N(int64(l.Period))
			for range r.IntN(60) {
				now += r.Int64N(int64(l.Period) / l.Rate)
				s, _ = Decide(s, l, 1+r.Int64N(3), now)
			}
			if s == (State{}) {
				continue // a fresh state: each clock starts its own windows
			}
			d := 1 + r.Int64N(int64(3*time.Second))
			ws, rs := s, Later(s, d)
			// From the same real instants on, writer at t, reader at t+d.
			t1 := now + r.Int64N(int64(l.Period))
			var wAdm, rAdm int64
			for i := range 40 {
				at := t1 + int64(i)*r.Int64N(int64(l.Period)/4+1)
				_, peekW := Decide(ws, l, 0, at)
				_, peekR := Decide(rs, l, 0, at+d)
				if peekR.Remaining > peekW.Remaining {
					t.Fatalf("%v %+v d=%v: reader ahead holds %d, writer %d", alg, l, time.Duration(d), peekR.Remaining, peekW.Remaining)
				}
				var res Result
				if ws, res = Decide(ws, l, 1, at); res.Allowed {
					wAdm++
				}
				if rs, res = Decide(rs, l, 1, at+d); res.Allowed {
					rAdm++
				}
			}
			if rAdm > wAdm {
				t.Fatalf("%v %+v d=%v: reader ahead admitted %d, writer %d", alg, l, time.Duration(d), rAdm, wAdm)
			}
		}
	}
	// Without Later, a token bucket read 2 s ahead is 2 s × rate fuller.
	l := Limit{Algorithm: TokenBucket, Rate: 10, Period: time.Second}
	s, _ := Decide(State{}, l, 10, t0)
	_, raw := Decide(s, l, 0, t0+int64(2*time.Second))
	_, moved := Decide(Later(s, int64(2*time.Second)), l, 0, t0+int64(2*time.Second))
	if raw.Remaining != 10 || moved.Remaining != 0 {
		t.Fatalf("2 s ahead: raw %d (want 10, the skew's refill), with Later %d (want 0)", raw.Remaining, moved.Remaining)
	}
	if Later(State{}, 5) != (State{}) || Later(s, -5) != s {
		t.Fatal("Later changed a fresh state, or a state read on a clock behind")
	}
}
