package client

import (
	"testing"
	"time"
)

// A gateway holds one ask for an automatic lease per key at a time: a
// cold key may always ask, a leased one is spent from, and once spent one
// check claims the ask while the others wait for its answer.
func TestClaimAuto(t *testing.T) {
	var l localState
	l.init()
	id := ruleKey{"r", "k"}
	now := time.Unix(1_800_000_000, 0)
	if _, st, _ := l.claimAuto(id, 1, now, time.Second); st != autoCold {
		t.Fatalf("a key with no lease: %v, want cold", st)
	}
	l.addLease(id, 2, Limit{Remaining: 5}, now.Add(time.Second))
	for i := range 2 {
		lim, st, _ := l.claimAuto(id, 1, now, time.Second)
		if st != autoSpent || !lim.Leased || lim.Remaining != int64(5+1-i) {
			t.Fatalf("spend %d: %v %+v", i, st, lim)
		}
	}
	if _, st, _ := l.claimAuto(id, 1, now, time.Second); st != autoClaimed {
		t.Fatalf("spent lease: %v, want the ask claimed", st)
	}
	_, st, wait := l.claimAuto(id, 1, now, time.Second)
	if st != autoWait || wait == nil {
		t.Fatalf("second check: %v, want to wait", st)
	}
	if _, st2, wait2 := l.claimAuto(id, 1, now, time.Second); st2 != autoWait || wait2 != wait {
		t.Fatalf("third check: %v, want to wait on the same ask", st2)
	}
	select {
	case <-wait:
		t.Fatal("woken before the ask was answered")
	default:
	}
	l.addLease(id, 3, Limit{}, now.Add(time.Second)) // the grant arrives
	l.endAsk(id)
	select {
	case <-wait:
	default:
		t.Fatal("not woken by the answer")
	}
	if _, st, _ := l.claimAuto(id, 1, now, time.Second); st != autoSpent {
		t.Fatalf("after the grant: %v, want spent", st)
	}
	// An ask whose endAsk was missed stops holding the key after hold.
	l.addLease(id, 0, Limit{}, now.Add(time.Second))
	l.leases[id].tokens = 0
	if _, st, _ := l.claimAuto(id, 1, now, time.Second); st != autoClaimed {
		t.Fatalf("%v, want claimed", st)
	}
	if _, st, _ := l.claimAuto(id, 1, now.Add(2*time.Second), time.Second); st != autoClaimed {
		t.Fatalf("after the hold: %v, want claimed again", st)
	}
}
