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
		// Refused, and the checks every rule has still run (they were
		// skipped for a concurrency rule once).
		{"calendar", func(r *Rule) { r.Calendar = "day" }},
		{"timezone", func(r *Rule) { r.Timezone = "Mars/Olympus" }},
		{"priority_header", func(r *Rule) { r.PriorityHeader = "X-P" }},
		{"durable", func(r *Rule) { r.Durable = "maybe" }},
		{"fail_mode", func(r *Rule) { r.FailMode = "sideways" }},
		{"events.sample", func(r *Rule) { r.Events.Sample = 2 }},
		{"id", func(r *Rule) { r.ID = "" }},
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

// A concurrency rule's permits are never written to the data dir: they
// last at most permit_ttl, and the counters file holds no permit lists.
func TestConcurrencyRuleIsNotDurable(t *testing.T) {
	r := Rule{ID: "c", Match: Match{Route: "/x"}, Key: "apikey", Algorithm: AlgConcurrency, Concurrency: 4}
	if r.IsDurable() {
		t.Fatal("a concurrency rule is durable")
	}
	r.Algorithm, r.Concurrency, r.Rate, r.Period = AlgTokenBucket, 0, 5, Duration(24*time.Hour)
	if !r.IsDurable() {
		t.Fatal("a daily token bucket is not durable")
	}
}
