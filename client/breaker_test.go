package client

import (
	"testing"
	"time"
)

func testBreaker(failures int, cooldown time.Duration) *nodeConn {
	cfg := DefaultConfig()
	cfg.BreakerFailures, cfg.BreakerCooldown = failures, cooldown
	return &nodeConn{c: &Client{cfg: cfg}}
}

// RPCs in flight together that fail together are one failed attempt: a
// stall of a few milliseconds must not open the breaker for a cooldown.
func TestBreakerCountsConcurrentFailuresOnce(t *testing.T) {
	n := testBreaker(3, time.Second)
	now := time.Unix(0, 0)
	for round := 1; round <= 3; round++ {
		seqs := []uint64{n.begin(), n.begin(), n.begin(), n.begin()} // 4 in flight
		for _, s := range seqs {
			n.record(s, false, now)
		}
		if n.failures != round {
			t.Fatalf("round %d: %d failures counted, want %d", round, n.failures, round)
		}
		if open := n.breakerOpen(); open != (round == 3) {
			t.Fatalf("round %d: open %v", round, open)
		}
	}
	if got := n.c.stats.breakerOpens.Load(); got != 1 {
		t.Errorf("opened %d times, want 1", got)
	}
	// A success closes it and starts the count again.
	n.record(n.begin(), true, now)
	if n.breakerOpen() || n.failures != 0 {
		t.Errorf("after a success: open %v, failures %d", n.breakerOpen(), n.failures)
	}
	// Sequential failures each count.
	for i := 0; i < 3; i++ {
		n.record(n.begin(), false, now)
	}
	if !n.breakerOpen() {
		t.Error("3 sequential failures did not open the breaker")
	}
}

// A probe that is never sent or never answered must not keep the breaker
// open for good: the next probe goes one cooldown later.
func TestBreakerLostProbe(t *testing.T) {
	n := testBreaker(1, time.Second)
	t0 := time.Unix(0, 0)
	n.record(n.begin(), false, t0)
	if n.allow(t0.Add(999 * time.Millisecond)) {
		t.Fatal("allowed during the cooldown")
	}
	at := t0.Add(time.Second)
	if !n.allow(at) {
		t.Fatal("no probe after the cooldown")
	}
	// The probe is lost: nothing is recorded.
	if n.allow(at) || n.allow(at.Add(999*time.Millisecond)) {
		t.Fatal("a second call let through while the probe is out")
	}
	if !n.allow(at.Add(time.Second)) {
		t.Fatal("no new probe a cooldown after a lost one")
	}
	n.record(n.begin(), true, at.Add(time.Second))
	if !n.allow(at.Add(time.Second)) || n.breakerOpen() {
		t.Error("a successful probe did not close the breaker")
	}
}
