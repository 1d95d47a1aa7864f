package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
)

// BenchmarkObserveAllowed is what observe adds to a batch of 100 allowed
// items over 1,000 keys of one rule (the common case: no event, one item
// in four into the hot-key sketch).
func BenchmarkObserveAllowed(b *testing.B) {
	n := &Node{ops: newOpsState(time.Now())}
	batches := make([][]limit.Item, 10) // 1,000 keys over 10 batches of 100
	for i := range batches {
		batches[i] = make([]limit.Item, 100)
		for j := range batches[i] {
			batches[i][j] = limit.Item{Key: fmt.Sprintf("apikey:k%d", i*100+j), Rule: "r", Cost: 1}
		}
	}
	res := make([]limit.Result, 100)
	for i := range res {
		res[i].Allowed = true
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n.observe(batches[i%len(batches)], res)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(res)), "ns/item")
}

// TestObserveAllowedDoesNotAllocateForKnownKeys: once a rule's keys are
// in its sketch, observing allowed items allocates nothing.
func TestObserveAllowedDoesNotAllocateForKnownKeys(t *testing.T) {
	n := &Node{ops: newOpsState(time.Now())}
	items := []limit.Item{{Key: "apikey:a", Rule: "r", Cost: 1}, {Key: "apikey:b", Rule: "r", Cost: 1}}
	res := []limit.Result{{Allowed: true}, {Allowed: true}}
	for range 100 {
		n.observe(items, res)
	}
	if a := testing.AllocsPerRun(1000, func() { n.observe(items, res) }); a != 0 {
		t.Fatalf("observe allocates %.1f per batch of allowed, known keys", a)
	}
}
