package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/ring"
)

// slowClock is a node clock (Config.Now) running at 1/50 of real time,
// skewed by skew: the refill of the seconds a cluster needs to form stays
// far below a token, while a skew of 2 s is two tokens of a 1/s rule.
func slowClock(base int64, skew time.Duration) func() int64 {
	return func() int64 { return base + (time.Now().UnixNano()-base)/50 + int64(skew) }
}

// Counters handed off to a node whose clock is 2 s ahead of the old
// owner's: the new owner reads the 2 s as skew, not as time passed, and
// admits nothing on keys that were spent (before the fix it refilled two
// tokens of each moved key). Keys that did not move stay spent too.
func TestHandoffToAClockAheadGrantsNothing(t *testing.T) {
	base := time.Now().UnixNano()
	tc := &testcluster.Cluster{T: t}
	t.Cleanup(tc.Close)
	cfg := testcluster.Config(t, "n1")
	cfg.BootstrapExpect = 1
	cfg.Now = slowClock(base, 0)
	n1 := tc.Start(cfg)
	tc.WaitStable(1)
	c := wrapCluster(t, tc)
	version := tc.ApplyRules("rules:\n  - {id: skew, match: {route: /skew}, key: apikey, rate: 1, period: 1s, burst: 5}\n")

	var keys []string
	for i := range 40 {
		k := fmt.Sprintf("apikey:skew-%d", i)
		keys = append(keys, k)
		for j := range 6 {
			if got := c.checkOnce(n1, k, "skew", 1).Allowed; got != (j < 5) {
				t.Fatalf("%s: check %d allowed=%v on a fresh bucket of 5", k, j+1, got)
			}
		}
	}

	cfg2 := testcluster.Config(t, "n2")
	cfg2.Join = []string{n1.GossipAddr()}
	cfg2.Now = slowClock(base, 2*time.Second)
	n2 := tc.Start(cfg2)
	tc.WaitStable(2)
	testwait.For(t, 10*time.Second, "the rules on n2", func() error {
		if s := n2.Store().Current(); s == nil || s.Version < version {
			return fmt.Errorf("n2 has not applied version %d", version)
		}
		return nil
	})
	r, err := ring.New([]string{"n1", "n2"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	moved, admitted := 0, map[string]int{}
	for _, k := range keys {
		owner := r.Owner(k)
		if owner == "n2" {
			moved++
		}
		if c.checkOnce(n1, k, "skew", 1).Allowed {
			admitted[owner]++
		}
		if c.checkOnce(n2, k, "skew", 1).Allowed {
			admitted[owner]++
		}
	}
	t.Logf("%d of %d keys moved to n2 (clock 2 s ahead); admitted on spent keys: %v", moved, len(keys), admitted)
	if moved == 0 {
		t.Fatal("no key moved to n2: nothing was tested")
	}
	if admitted["n2"] != 0 || admitted["n1"] != 0 {
		t.Fatalf("spent keys admitted after the hand-off: %d on keys n2 (clock ahead) took, %d on keys n1 kept", admitted["n2"], admitted["n1"])
	}
}

// Three nodes with clocks at -2 s, 0 and +2 s: each key is decided by its
// owner's clock alone, so checks through every node are exact; then the
// node with the slowest clock is killed and the replicas it leaves (clocks
// ahead of it) are promoted: its spent keys stay spent.
func TestSkewedClocksStayExactThroughAFailover(t *testing.T) {
	base := time.Now().UnixNano()
	tc := &testcluster.Cluster{T: t}
	t.Cleanup(tc.Close)
	skews := []time.Duration{-2 * time.Second, 0, 2 * time.Second}
	for i, skew := range skews {
		cfg := testcluster.Config(t, fmt.Sprintf("n%d", i+1))
		cfg.BootstrapExpect = len(skews)
		if i > 0 {
			cfg.Join = []string{tc.Nodes[0].GossipAddr()}
		}
		cfg.Now = slowClock(base, skew)
		tc.Start(cfg)
	}
	tc.WaitStable(len(skews))
	c := wrapCluster(t, tc)
	tc.ApplyRules("rules:\n  - {id: skew, match: {route: /skew}, key: apikey, rate: 1, period: 1s, burst: 5}\n")
	r, err := ring.New([]string{"n1", "n2", "n3"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var victims []string
	for i := range 30 {
		k := fmt.Sprintf("apikey:skew-%d", i)
		allowed := 0
		for j := range 8 {
			if c.checkOnce(tc.Nodes[j%3], k, "skew", 1).Allowed {
				allowed++
			}
		}
		if allowed != 5 {
			t.Fatalf("%s: %d of 8 checks through three skewed nodes admitted, want exactly 5", k, allowed)
		}
		if r.Owner(k) == "n1" {
			victims = append(victims, k)
		}
	}
	// Every change shipped to its replicas before the owner dies (this
	// test is about clocks, not about the replication window).
	testwait.For(t, 10*time.Second, "replication to drain", func() error {
		for _, n := range tc.Live() {
			if v := metricValue(scrape(t, n.HTTPAddr()), "weir_replication_pending"); v != 0 {
				return fmt.Errorf("%s: %v states waiting to be shipped", n.ID(), v)
			}
		}
		return nil
	})
	tc.Kill(0)
	testwait.For(t, 30*time.Second, "the survivors without n1", func() error {
		for _, n := range tc.Live() {
			if k := testcluster.InRing(n); k != 2 {
				return fmt.Errorf("%s sees %d members", n.ID(), k)
			}
		}
		return nil
	})
	admitted := 0
	for _, k := range victims {
		for _, n := range tc.Live() {
			if c.checkOnce(n, k, "skew", 1).Allowed {
				admitted++
			}
		}
	}
	t.Logf("%d keys owned by n1 (clock -2 s), promoted on clocks ahead of it: %d admitted", len(victims), admitted)
	if len(victims) == 0 {
		t.Fatal("n1 owned no key: nothing was tested")
	}
	if admitted != 0 {
		t.Fatalf("%d checks admitted on spent keys after the owner with the slowest clock died", admitted)
	}
}
