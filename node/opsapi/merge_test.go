package opsapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/node/events"
)

func TestMergeHotKeysSumsAndKeepsTopPerRule(t *testing.T) {
	in := []HotKey{
		{Rule: "b", Key: "x", Rate: 1},
		{Rule: "a", Key: "k1", Rate: 5, ErrRate: 1},
		{Rule: "a", Key: "k2", Rate: 4},
		{Rule: "a", Key: "k1", Rate: 2}, // the same key from another node
		{Rule: "a", Key: "k3", Rate: 1},
	}
	got := fmt.Sprint(MergeHotKeys(in, 2))
	want := fmt.Sprint([]HotKey{{"a", "k1", 7, 1}, {"a", "k2", 4, 0}, {"b", "x", 1, 0}})
	if got != want {
		t.Fatalf("MergeHotKeys = %s, want %s", got, want)
	}
}

func TestMergeRatesSumsByTime(t *testing.T) {
	got := MergeRates([]RuleRate{
		{Rule: "r", Points: []RatePoint{{T: 2, Denied: 1}, {T: 4, Allowed: 3}}},
		{Rule: "r", Points: []RatePoint{{T: 4, Allowed: 1, Error: 2}}},
		{Rule: "q", Points: []RatePoint{{T: 2, Denied: 5}}},
	})
	want := "[{q [{2 0 5 0}]} {r [{2 0 1 0} {4 4 0 2}]}]"
	if fmt.Sprint(got) != want {
		t.Fatalf("MergeRates = %v, want %s", got, want)
	}
}

func TestMergeGateways(t *testing.T) {
	t1, t2 := time.Unix(10, 0), time.Unix(20, 0)
	got := MergeGateways([]Gateway{
		{ID: "g", Nodes: []string{"n2"}, LastReport: t1, FailOpen: 1, Local: 2},
		{ID: "g", Nodes: []string{"n1"}, LastReport: t2, FailOpen: 3, FailClosed: 1},
	})
	if len(got) != 1 || got[0].FailOpen != 4 || got[0].Local != 2 || got[0].FailClosed != 1 || !got[0].LastReport.Equal(t2) ||
		strings.Join(got[0].Nodes, ",") != "n1,n2" {
		t.Fatalf("MergeGateways = %+v", got)
	}
}

func TestReportValidate(t *testing.T) {
	ok := Report{Gateway: "gw", Counts: []ReportCount{{Rule: "r", FailOpen: 1}}, Events: []events.Event{{Rule: "r", Key: "k", Decision: "denied"}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Report{
		"no gateway":     {},
		"long gateway":   {Gateway: strings.Repeat("g", MaxGatewayID+1)},
		"count no rule":  {Gateway: "gw", Counts: []ReportCount{{FailOpen: 1}}},
		"event decision": {Gateway: "gw", Events: []events.Event{{Rule: "r", Key: "k", Decision: "maybe"}}},
		"event no key":   {Gateway: "gw", Events: []events.Event{{Rule: "r", Decision: "denied"}}},
		"too many":       {Gateway: "gw", Events: make([]events.Event, MaxReportEvents+1)},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
}

// MergePermits sums one rule's permits over nodes, by rule, and leaves out
// rules holding none.
func TestMergePermitsSumsByRule(t *testing.T) {
	got := MergePermits([]RulePermits{{Rule: "b", InUse: 2}, {Rule: "a", InUse: 1}, {Rule: "b", InUse: 3}, {Rule: "c", InUse: 0}})
	want := []RulePermits{{Rule: "a", InUse: 1}, {Rule: "b", InUse: 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("MergePermits = %v, want %v", got, want)
	}
}
