package test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node"
)

// checkLatency runs callers × perCaller checks of (rule, key-i) against
// nodes, round robin, and returns p50 and p99 and the failed checks.
func checkLatency(t *testing.T, nodes []*node.Node, rule string, callers, perCaller int) (p50, p99 time.Duration, failed int) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, perCaller)
			bad := 0
			for i := range perCaller {
				n := nodes[(c+i)%len(nodes)]
				items := []limit.Item{{Rule: rule, Key: fmt.Sprintf("apikey:ak_%d", i%50), Cost: 1}}
				out := make([]limit.Result, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				err := n.Check(ctx, items, out)
				local = append(local, time.Since(start))
				cancel()
				if err != nil || out[0].Code != 0 {
					if bad == 0 {
						t.Logf("first failed check on %s: err %v, code %v (%s)", n.ID(), err, out[0].Code, out[0].Err)
					}
					bad++
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			failed += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], failed
}

// TestRegionsCheckLatency is a benchmark, not a timed assertion: it
// reports p50 and p99 of checks of a global rule in each of three peered
// regions (10 ms added each way between regions, exchanges every 250 ms)
// beside the same checks on a single cluster without regions, so the
// peering's cost on the check path shows (it should be none: a check
// never waits for another region). It asserts only that every check was
// decided.
func TestRegionsCheckLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark")
	}
	const callers, perCaller = 4, 1000
	single := testcluster.New(t, 2)
	single.ApplyRules(regionRules)
	p50, p99, failed := checkLatency(t, single.Live(), "orders", callers, perCaller)
	t.Logf("single cluster, no regions: p50 %v p99 %v (%d checks)", p50, p99, callers*perCaller)
	if failed > 0 {
		t.Errorf("single cluster: %d checks failed", failed)
	}
	single.Close()

	rs := newRegionSet(t, 2, 10*time.Millisecond)
	rs.applyRules(regionRules)
	for _, name := range rs.names {
		p50, p99, failed := checkLatency(t, rs.cl[name].Live(), "orders", callers, perCaller)
		t.Logf("region %s, peered with 2 regions: p50 %v p99 %v (%d checks)", name, p50, p99, callers*perCaller)
		if failed > 0 {
			t.Errorf("region %s: %d checks failed", name, failed)
		}
	}
}
