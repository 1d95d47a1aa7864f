package rules

import (
	"reflect"
	"testing"
	"time"
)

// Equal looks at every field of a rule (and of its match): a rule changed
// in any one field is not Equal to the old one, so the FSM records the
// change instead of keeping the old rule. A field added to Rule or Match
// without a case here fails the test.
func TestEqualSeesEveryField(t *testing.T) {
	base := Rule{ID: "a", Match: Match{Route: "/x", Method: "GET", Plan: "p", Domain: "d",
		Descriptor: []Entry{{Key: "k", Value: "v"}}}, Key: KeyAPIKey, Algorithm: AlgTokenBucket,
		Rate: 1, Period: Duration(time.Second), Burst: 2, FailMode: FailOpen, Timeout: Duration(time.Millisecond),
		Lease: 1, MaxKeys: 3, Replaces: []string{"b"}, Cost: 1, CostHeader: "X-Cost", Scope: ScopeRegion,
		Events: Events{Sample: 0.5}}
	if !base.Equal(base) {
		t.Fatal("a rule is not Equal to itself")
	}
	change := map[string]func(r *Rule){
		"ID": func(r *Rule) { r.ID = "b" }, "Key": func(r *Rule) { r.Key = KeyIP },
		"Algorithm": func(r *Rule) { r.Algorithm = AlgFixedWindow }, "Rate": func(r *Rule) { r.Rate = 9 },
		"Period": func(r *Rule) { r.Period = Duration(time.Hour) }, "Burst": func(r *Rule) { r.Burst = 9 },
		"FailMode": func(r *Rule) { r.FailMode = FailClosed }, "Timeout": func(r *Rule) { r.Timeout = Duration(time.Second) },
		"Shadow": func(r *Rule) { r.Shadow = true }, "Lease": func(r *Rule) { r.Lease = 9 },
		"MaxKeys": func(r *Rule) { r.MaxKeys = 9 }, "Replaces": func(r *Rule) { r.Replaces = []string{"c"} },
		"Unlimited": func(r *Rule) { r.Unlimited = true }, "Cost": func(r *Rule) { r.Cost = 50 },
		"CostHeader": func(r *Rule) { r.CostHeader = "X-Other" }, "Scope": func(r *Rule) { r.Scope = ScopeGlobal },
		"Events":   func(r *Rule) { r.Events.Redact = true },
		"Durable":  func(r *Rule) { r.Durable = DurableOff },
		"Calendar": func(r *Rule) { r.Calendar = "month" }, "Timezone": func(r *Rule) { r.Timezone = "Europe/Berlin" },
		"Match.Route": func(r *Rule) { r.Match.Route = "/y" }, "Match.Method": func(r *Rule) { r.Match.Method = "PUT" },
		"Match.Plan": func(r *Rule) { r.Match.Plan = "q" }, "Match.Domain": func(r *Rule) { r.Match.Domain = "e" },
		"Match.Descriptor": func(r *Rule) { r.Match.Descriptor = []Entry{{Key: "k", Value: "w"}} },
		"Concurrency":      func(r *Rule) { r.Concurrency = 4 },
		"PermitTTL":        func(r *Rule) { r.PermitTTL = Duration(time.Minute) },
		"PriorityHeader":   func(r *Rule) { r.PriorityHeader = "X-Priority" },
		"PriorityDefault":  func(r *Rule) { r.PriorityDefault = "batch" },
		"Reserve":          func(r *Rule) { r.Reserve = Reserves{"critical": 20} },
	}
	fields := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Rule]()) {
		if f.Name != "Match" {
			fields[f.Name] = true
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Match]()) {
		fields["Match."+f.Name] = true
	}
	for name := range fields {
		mut, ok := change[name]
		if !ok {
			t.Errorf("Rule field %s has no case here: does Equal compare it?", name)
			continue
		}
		r := base
		r.Match.Descriptor = append([]Entry(nil), base.Match.Descriptor...)
		r.Replaces = append([]string(nil), base.Replaces...)
		mut(&r)
		if base.Equal(r) {
			t.Errorf("a rule changed in %s is Equal to the old one", name)
		}
	}
}
