package sim_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/sim"
)

// limit is what every test key allows: L in a window the fake clock does
// not leave (the cluster starts at 03:04:05 and steps a few seconds), so
// nothing refills and exactly L are admitted, whichever nodes decide.
const L = 3

var lim = bucket.Limit{Algorithm: bucket.FixedWindow, Rate: L, Period: time.Hour}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// start returns a settled cluster of n1, n2, n3 joined one by one.
func start(t *testing.T, seed uint64) (context.Context, *sim.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := c.Join(ctx, id); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		if err := c.Settle(ctx, 60); err != nil {
			t.Fatalf("after join %s: %v", id, err)
		}
	}
	return ctx, c
}

// tally is what checks of one key saw.
type tally struct {
	allowed int
	by      map[string]int // deciding node -> checks
	errs    []string
	waited  int // checks decided after waiting for the pull
}

// checkRounds checks every key rounds times, each round entering at the
// next live node, and returns what each key saw.
func checkRounds(t *testing.T, ctx context.Context, c *sim.Cluster, ks []string, rounds int) map[string]*tally {
	t.Helper()
	got := map[string]*tally{}
	for _, k := range ks {
		got[k] = &tally{by: map[string]int{}}
	}
	live := c.Live()
	for r := range rounds {
		for i, k := range ks {
			entry := c.Node(live[(i+r)%len(live)])
			res, err := entry.Check(ctx, []sim.Item{{Rule: "r", Key: k, Limit: lim, Cost: 1}})
			if err != nil {
				t.Fatalf("check %s at %s: %v", k, entry.ID, err)
			}
			tl := got[k]
			if res[0].Allowed {
				tl.allowed++
			}
			if res[0].Err != "" {
				tl.errs = append(tl.errs, entry.ID+": "+res[0].Err)
			}
			tl.by[res[0].By]++
			if res[0].Waited {
				tl.waited++
			}
		}
	}
	return got
}

// exact asserts each key admitted want and every check of it was decided
// by one node.
func exact(t *testing.T, what string, got map[string]*tally, want int) {
	t.Helper()
	for k, tl := range got {
		if tl.allowed != want || len(tl.errs) > 0 {
			t.Errorf("%s: key %s admitted %d, want %d (unavailable: %v)", what, k, tl.allowed, want, tl.errs)
		}
		if len(tl.by) != 1 {
			t.Errorf("%s: key %s decided by %v, want one owner", what, k, tl.by)
		}
	}
}

// spend checks fresh keys until they are spent, through every node: each
// admits exactly L.
func spend(t *testing.T, ctx context.Context, c *sim.Cluster, ks []string) {
	t.Helper()
	exact(t, "spending "+ks[0]+"..", checkRounds(t, ctx, c, ks, L+3), L)
}

// A key with limit L admits exactly L across all entry nodes, each check
// decided by its one owner, forwarded there by the others.
func TestSimChecksExact(t *testing.T) {
	ctx, c := start(t, 1)
	spend(t, ctx, c, keys("k", 30))
	forwarded := 0
	for _, line := range c.Trace() {
		if strings.Contains(line, "check ") && !strings.Contains(line, "hops 0") {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Error("no check was forwarded: the entry nodes never routed to another owner")
	}
}

// join: a 4th node joins while spent keys are checked through every node
// (before the pulls ran, while they run, after they settled): they stay
// spent, and fresh keys after the change admit exactly L at one owner.
func joinScenario(t *testing.T, seed uint64) []string {
	ctx, c := start(t, seed)
	spent := keys("k", 30)
	spend(t, ctx, c, spent)
	if _, err := c.Join(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	// The pulls are queued, not run: these checks forward to the old
	// holders or wait for the pull.
	during := checkRounds(t, ctx, c, spent, 1)
	exact(t, "spent keys during the join", during, 0)
	waited := 0
	for _, tl := range during {
		waited += tl.waited
	}
	if waited == 0 {
		t.Error("no check during the join waited for n4's pull: the wait path was not taken")
	}
	if err := c.Settle(ctx, 60); err != nil {
		t.Fatal(err)
	}
	exact(t, "spent keys after the join", checkRounds(t, ctx, c, spent, 4), 0)
	pastGrace(t, ctx, c)
	exact(t, "spent keys past the grace", checkRounds(t, ctx, c, spent, 4), 0)
	spend(t, ctx, c, keys("j", 30))
	owners := map[string]bool{}
	for _, line := range c.Trace() {
		if strings.Contains(line, "by n4") {
			owners["n4"] = true
		}
	}
	if !owners["n4"] {
		t.Error("n4 decided no key after joining: the ring change did not reach the check path")
	}
	return c.Trace()
}

// leave: n2 leaves gracefully; its partitions are pulled by the others
// and every key it decided stays spent; fresh keys admit exactly L.
func leaveScenario(t *testing.T, seed uint64) []string {
	ctx, c := start(t, seed)
	spent := keys("k", 30)
	spend(t, ctx, c, spent)
	if err := c.Leave(ctx, "n2", 60); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if got := c.Live(); !slices.Equal(got, []string{"n1", "n3"}) {
		t.Fatalf("live after leave: %v", got)
	}
	exact(t, "spent keys after the leave", checkRounds(t, ctx, c, spent, 4), 0)
	pastGrace(t, ctx, c)
	exact(t, "spent keys past the grace", checkRounds(t, ctx, c, spent, 4), 0)
	spend(t, ctx, c, keys("j", 30))
	if _, err := c.Node("n2").Check(ctx, []sim.Item{{Rule: "r", Key: "k00", Limit: lim, Cost: 1}}); err == nil {
		t.Error("a check entered at the node that left")
	}
	return c.Trace()
}

// pastGrace steps the clock past the hand-off's grace, so the old holders
// let go of what they released (their counters dropped on a tick).
func pastGrace(t *testing.T, ctx context.Context, c *sim.Cluster) {
	t.Helper()
	for range 35 {
		if err := c.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Settle(ctx, 5); err != nil {
		t.Fatal(err)
	}
}

// The cluster runs on the driver's goroutine alone: joins, checks, steps
// and a leave leave no goroutine behind (no part has a loop of its own).
func TestSimRunsOnTheDriversGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, c := start(t, 1)
	spend(t, ctx, c, keys("k", 10))
	if err := c.Leave(ctx, "n2", 60); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, 60); err != nil {
		t.Fatal(err)
	}
	// Fewer is fine: the previous test's goroutines may still have been
	// ending when before was read.
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines while the cluster runs, %d before it started", n, before)
	}
}

func TestSimJoinKeepsSpentKeys(t *testing.T) { joinScenario(t, 1) }

func TestSimLeaveKeepsSpentKeys(t *testing.T) { leaveScenario(t, 1) }

// The same seed and the same calls give the same decisions, ring changes
// and hand-offs, line for line.
func TestSimSameSeedSameTrace(t *testing.T) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, uint64) []string
	}{{"join", joinScenario}, {"leave", leaveScenario}} {
		t.Run(sc.name, func(t *testing.T) {
			a, b := sc.run(t, 7), sc.run(t, 7)
			if len(a) == 0 {
				t.Fatal("empty trace")
			}
			if !slices.Equal(a, b) {
				for i := range min(len(a), len(b)) {
					if a[i] != b[i] {
						t.Fatalf("traces differ at line %d of %d/%d:\n%s\n%s", i, len(a), len(b), a[i], b[i])
					}
				}
				t.Fatalf("traces differ in length: %d and %d", len(a), len(b))
			}
		})
	}
}
