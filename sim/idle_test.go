package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/sim"
)

// A counter moved by hand-off keeps its own idle deadline: a monthly-ish
// window (30 days) spent before a 4th node joined stays spent a day and
// more after the move, whichever node holds it now. (Before deadlines
// travelled, an imported counter was kept a fixed 24 h, so the keys n4
// pulled were dropped and admitted their whole quota again.)
func TestSimHandedOffCounterKeepsItsIdleDeadline(t *testing.T) {
	ctx, c := start(t, 1)
	month := bucket.Limit{Algorithm: bucket.FixedWindow, Rate: L, Period: 30 * 24 * time.Hour}
	ks := keys("m", 40)
	check := func() map[string]int {
		t.Helper()
		admitted, by := map[string]int{}, map[string]int{}
		live := c.Live()
		for r := range L + 2 {
			for i, k := range ks {
				res, err := c.Node(live[(i+r)%len(live)]).Check(ctx, []sim.Item{{Rule: "monthly", Key: k, Limit: month, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if res[0].Err != "" {
					t.Fatalf("check %s: %s", k, res[0].Err)
				}
				if res[0].Allowed {
					admitted[k]++
				}
				by[res[0].By]++
			}
		}
		if by["n4"] == 0 && len(live) == 4 {
			t.Fatal("n4 decided none of the keys: nothing was handed off to it")
		}
		return admitted
	}
	for k, n := range check() {
		if n != L {
			t.Fatalf("spending %s admitted %d, want %d", k, n, L)
		}
	}
	if _, err := c.Join(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, 60); err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, line := range c.Trace() {
		moved = moved || strings.Contains(line, "n4 holds") && !strings.Contains(line, "n4 holds 0 counters")
	}
	if !moved {
		t.Fatal("n4 holds no counter after the join")
	}
	// A day and an hour later: the 30-day windows (aligned to the unix
	// epoch) that hold the cluster's start end 14 days after it.
	c.Clock.Advance(25 * time.Hour)
	pastGrace(t, ctx, c) // sweeps run on every step
	for k, n := range check() {
		if n != 0 {
			t.Errorf("key %s admitted %d a day after the hand-off, want 0 (its 30-day window is spent)", k, n)
		}
	}
}
