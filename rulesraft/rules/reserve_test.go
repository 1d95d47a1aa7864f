package rules

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A reserve: its floors, the class of a request, the feature it needs, and
// what is refused.
func TestReserveRule(t *testing.T) {
	ok := Rule{ID: "s", Match: Match{Route: "/x"}, Key: KeyGlobal, Rate: 10, Period: Duration(time.Second), Burst: 100,
		PriorityHeader: "X-Priority", Reserve: Reserves{"critical": 20, "high": 10}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		class string
		want  int64
	}{{"critical", 10}, {"high", 20}, {"default", 30}, {"bulk", 30}} {
		if got := ok.Reserve.Floor(c.class, 100); got != c.want {
			t.Errorf("floor of %s: %d, want %d", c.class, got, c.want)
		}
	}
	if got := ok.Reserve.Floor("bulk", 7); got != 3 { // 30% of 7 rounded up
		t.Errorf("floor rounds up: %d", got)
	}
	hdr := func(v string) func(string) string { return func(string) string { return v } }
	if c := ok.Class(hdr("critical")); c != "critical" {
		t.Errorf("class from header: %q", c)
	}
	if c := ok.Class(hdr("")); c != DefaultPriorityClass {
		t.Errorf("class without header: %q", c)
	}
	withDefault := ok
	withDefault.PriorityDefault = "bulk"
	if c := withDefault.Class(nil); c != "bulk" {
		t.Errorf("priority_default: %q", c)
	}
	if got := ok.Features(); !slices.Equal(got, []string{FeatureReserve}) {
		t.Errorf("Features = %v", got)
	}
	if n := Normalize(ok); n.Lease != LeaseOff {
		t.Errorf("a reserve rule normalizes to lease %s, want off", n.Lease)
	}
	for _, c := range []struct {
		field string
		mut   func(r *Rule)
	}{
		{"priority_header", func(r *Rule) { r.PriorityHeader = "" }},
		{"reserve", func(r *Rule) { r.Reserve = Reserves{"critical": 60, "high": 40} }},
		{"reserve", func(r *Rule) { r.Reserve = Reserves{"critical": 0} }},
		{"reserve", func(r *Rule) { r.Algorithm = AlgFixedWindow }},
		{"lease", func(r *Rule) { r.Lease = 5 }},
		{"reserve", func(r *Rule) { r.Reserve = nil }}, // priority_header alone
	} {
		r := ok
		c.mut(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.field+": ") {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
	src := "rules:\n  - id: s\n    match: {route: /x}\n    key: global\n    rate: 10\n    period: 1s\n    priority_header: X-Priority\n    reserve: {critical: 20%}\n"
	rs, err := ParseFile([]byte(src))
	if err != nil || rs[0].Reserve["critical"] != 20 {
		t.Fatalf("parse: %+v %v", rs, err)
	}
	if _, err := ParseFile([]byte(strings.Replace(src, "20%", "lots", 1))); err == nil || !strings.Contains(err.Error(), "reserve") {
		t.Fatalf("a reserve that is not a percent: %v", err)
	}
}
