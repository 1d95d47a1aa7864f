package bucket

import (
	"testing"
	"time"
)

// Permits: at most Rate held at once, each until released or Period ends;
// a release frees exactly the permit it names.
func TestPermitSteps(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Rate: 2, Period: 10 * time.Second}
	s := int64(time.Second)
	a, b, c := PermitID{1, 1}, PermitID{2, 2}, PermitID{3, 3}
	var ps []int64
	var r Result
	ps, r = TakePermit(ps, l, a, 1, 0)
	if !r.Allowed || r.Remaining != 1 || r.ResetAfter != 10*time.Second {
		t.Fatalf("first: %+v", r)
	}
	ps, r = TakePermit(ps, l, b, 1, 1*s)
	if !r.Allowed || r.Remaining != 0 {
		t.Fatalf("second: %+v", r)
	}
	ps, r = TakePermit(ps, l, c, 1, 2*s)
	if r.Allowed || r.RetryAfter != 8*time.Second || r.Remaining != 0 {
		t.Fatalf("third while two held: %+v", r)
	}
	if _, r = TakePermit(ps, l, c, 0, 2*s); !r.Allowed || PermitsHeld(ps, 2*s) != 2 {
		t.Fatalf("peek: %+v, held %d", r, PermitsHeld(ps, 2*s))
	}
	var ok bool
	if ps, ok = ReleasePermit(ps, c, 3*s); ok || PermitsHeld(ps, 3*s) != 2 {
		t.Fatalf("release of a permit never granted: %v, held %d", ok, PermitsHeld(ps, 3*s))
	}
	if ps, ok = ReleasePermit(ps, a, 3*s); !ok || PermitsHeld(ps, 3*s) != 1 || PermitExpiry(ps, b) != 11*s {
		t.Fatalf("release a: %v, held %d, b expires %d", ok, PermitsHeld(ps, 3*s), PermitExpiry(ps, b))
	}
	if ps, ok = ReleasePermit(ps, a, 3*s); ok {
		t.Fatal("a released twice")
	}
	ps, r = TakePermit(ps, l, c, 1, 4*s)
	if !r.Allowed || r.Remaining != 0 {
		t.Fatalf("c after a's release: %+v", r)
	}
	// b expires at 11 s: at 11 s a new permit passes, and b's release is late.
	ps, r = TakePermit(ps, l, a, 1, 11*s)
	if !r.Allowed {
		t.Fatalf("after b expired: %+v", r)
	}
	if _, ok = ReleasePermit(ps, b, 11*s); ok {
		t.Fatal("expired b released")
	}
	if got := PermitsHeld(ps, 30*s); got != 0 {
		t.Fatalf("held after every TTL: %d", got)
	}
	if _, r = TakePermit(nil, Limit{Algorithm: TokenBucket, Rate: 1, Period: time.Second}, a, 1, 0); r.Allowed {
		t.Fatal("TakePermit under a token bucket limit allowed")
	}
	if _, r = Decide(State{}, l, 1, 0); r.Allowed {
		t.Fatal("Decide served a concurrency limit")
	}
}
