package rules

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
)

// A concurrency rule takes limit and permit_ttl, refuses (listing them)
// the fields of rates, and uses the concurrency feature.
func TestConcurrencyRule(t *testing.T) {
	ok := Rule{ID: "c", Match: Match{Route: "/x"}, Key: KeyAPIKey, Algorithm: AlgConcurrency, Concurrency: 20}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if l := ok.Limit(); l != (bucket.Limit{Algorithm: bucket.Concurrency, Rate: 20, Period: DefaultPermitTTL}) {
		t.Fatalf("Limit = %+v", l)
	}
	if n := Normalize(ok); n.PermitTTL.D() != 30*time.Second || n.Lease != LeaseOff {
		t.Fatalf("Normalize: ttl %s lease %s", n.PermitTTL, n.Lease)
	}
	if got := ok.Features(); !slices.Equal(got, []string{FeatureConcurrency}) {
		t.Fatalf("Features = %v", got)
	}
	plain := Rule{ID: "p", Match: Match{Route: "/x"}, Key: KeyIP, Rate: 1, Period: Duration(time.Second)}
	if got := plain.Features(); len(got) != 0 {
		t.Fatalf("a token bucket rule uses %v", got)
	}
	for _, c := range []struct {
		field string
		mut   func(r *Rule)
	}{
		{"rate", func(r *Rule) { r.Rate = 5 }},
		{"period", func(r *Rule) { r.Period = Duration(time.Second) }},
		{"burst", func(r *Rule) { r.Burst = 5 }},
		{"lease", func(r *Rule) { r.Lease = 3 }},
		{"cost", func(r *Rule) { r.Cost = 2 }},
		{"cost_header", func(r *Rule) { r.CostHeader = "X-Cost" }},
		{"shadow", func(r *Rule) { r.Shadow = true }},
		{"scope", func(r *Rule) { r.Scope = ScopeGlobal }},
		{"limit", func(r *Rule) { r.Concurrency = 0 }},
		{"limit", func(r *Rule) { r.Concurrency = MaxConcurrency + 1 }},
		{"permit_ttl", func(r *Rule) { r.PermitTTL = Duration(2 * time.Hour) }},
	} {
		r := ok
		c.mut(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field+": ") {
			t.Errorf("%s: got %v", c.field, err)
		}
		if c.field == "rate" && !strings.Contains(err.Error(), "not rate, period, burst, lease, cost") {
			t.Errorf("the refusal does not list the refused fields: %v", err)
		}
	}
	for _, mut := range []func(r *Rule){
		func(r *Rule) { r.Concurrency = 3 },
		func(r *Rule) { r.PermitTTL = Duration(time.Second) },
	} {
		r := plain
		mut(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("a token bucket rule took %+v", r)
		}
	}
	src := "rules:\n  - id: c\n    match: {route: /x}\n    key: apikey\n    algorithm: concurrency\n    limit: 4\n    permit_ttl: 10s\n"
	f, err := ParseFile([]byte(src))
	if err != nil || f[0].Concurrency != 4 || f[0].PermitTTL.D() != 10*time.Second {
		t.Fatalf("parse: %+v %v", f, err)
	}
}
