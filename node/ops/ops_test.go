package ops

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// staticRules is a fixed rule set as a RuleView.
type staticRules map[string]rules.Rule

func (s staticRules) Version() uint64 { return 1 }
func (s staticRules) Rule(id string) (rules.Rule, bool) {
	r, ok := s[id]
	return r, ok
}

func testOps() *Ops {
	return newOps(Config{ID: "n1", Now: func() int64 { return time.Now().UnixNano() }}, staticRules{"r": {ID: "r"}})
}

// BenchmarkObserveAllowed is what sampling adds to a batch of 100 allowed
// items over 1,000 keys of one rule (the common case: no event, one item
// in four into the hot-key sketch).
func BenchmarkObserveAllowed(b *testing.B) {
	o := testOps()
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
		o.sample(batches[i%len(batches)], res)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(res)), "ns/item")
}

// TestObserveAllowedDoesNotAllocateForKnownKeys: once a rule's keys are
// in its sketch, observing allowed items allocates nothing.
func TestObserveAllowedDoesNotAllocateForKnownKeys(t *testing.T) {
	o := testOps()
	items := []limit.Item{{Key: "apikey:a", Rule: "r", Cost: 1}, {Key: "apikey:b", Rule: "r", Cost: 1}}
	res := []limit.Result{{Allowed: true}, {Allowed: true}}
	for range 100 {
		o.sample(items, res)
	}
	if a := testing.AllocsPerRun(1000, func() { o.sample(items, res) }); a != 0 {
		t.Fatalf("observe allocates %.1f per batch of allowed, known keys", a)
	}
}
