package ops

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/opsapi"
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

// A gateway's report counts in weir_checks_total and the gateways table,
// and its events join this node's in the one event shape: stamped with
// this node and the gateway, a redacted rule's key hashed, a missing time
// the node's, events and counts of rules this node does not know dropped.
func TestReportCountsAndEvents(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	o := newOps(Config{ID: "n1", Now: now.UnixNano}, staticRules{"r": {ID: "r"}, "red": {ID: "red", Events: rules.Events{Redact: true}}})
	o.met = newCheckMetrics(prometheus.NewRegistry())
	at := now.Add(-time.Second)
	rep := opsapi.Report{Gateway: "gw", Counts: []opsapi.ReportCount{{Rule: "r", LocalAllowed: 3, FailClosed: 2}, {Rule: "gone", FailOpen: 9}},
		Events: []events.Event{
			{Time: at, Rule: "r", RuleVersion: 4, Key: "apikey:a", Decision: events.Denied, Remaining: 0, Node: "elsewhere", Seq: 77},
			{Rule: "red", Key: "apikey:secret", Decision: events.Error},
			{Rule: "gone", Key: "apikey:b", Decision: events.Denied},
		}}
	if err := (source{o}).Report(rep); err != nil {
		t.Fatal(err)
	}
	c := o.met.counts()
	if got := c["r"]; got[decAllowed] != 3 || got[decDenied] != 2 {
		t.Errorf("r counted %v, want 3 allowed and 2 denied", got)
	}
	if _, ok := c["gone"]; ok {
		t.Errorf("an unknown rule's counts were kept: %v", c["gone"])
	}
	evs, _, _ := o.events.Since(0, events.Filter{}, 0)
	want := []events.Event{
		{Seq: 1, Time: at, Rule: "r", RuleVersion: 4, Key: "apikey:a", Decision: events.Denied, Node: "n1", Gateway: "gw"},
		{Seq: 2, Time: now, Rule: "red", Key: events.Redact("apikey:secret"), Decision: events.Error, Node: "n1", Gateway: "gw"},
	}
	if fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Errorf("events\n%v\nwant\n%v", evs, want)
	}
	gws := (source{o}).Gateways()
	if len(gws) != 1 || gws[0].ID != "gw" || gws[0].Local != 3 || gws[0].FailClosed != 2 || !gws[0].LastReport.Equal(now) {
		t.Errorf("gateways %+v, want gw with 3 local and 2 failed closed at %v", gws, now)
	}
}
