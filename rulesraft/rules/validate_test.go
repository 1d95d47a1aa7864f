package rules

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func validRule() Rule {
	return Rule{
		ID:     "orders.write",
		Match:  Match{Route: "/v1/orders", Method: "POST"},
		Key:    KeyAPIKey,
		Rate:   10,
		Period: Duration(time.Second),
		Burst:  20,
	}
}

func TestRuleValidateProblems(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Rule)
		field string // "" with msg "" means valid
		msg   string
	}{
		{"valid", func(*Rule) {}, "", ""},
		{"valid all fields", func(r *Rule) {
			r.Algorithm, r.FailMode, r.Timeout, r.Shadow, r.Lease = AlgLeakyBucket, FailClosed, Duration(10*time.Second), true, 20
			r.Match.Plan = "pro"
		}, "", ""},
		{"valid header key", func(r *Rule) { r.Key = "header:X-Tenant" }, "", ""},
		{"valid param route", func(r *Rule) { r.Match.Route = "/v1/users/{user_id}/orders/{id}" }, "", ""},
		{"valid wildcard", func(r *Rule) { r.Match.Route = "/v1/*" }, "", ""},
		{"valid root wildcard", func(r *Rule) { r.Match.Route = "/*" }, "", ""},
		{"valid method any", func(r *Rule) { r.Match.Method = "*" }, "", ""},
		{"valid burst absent", func(r *Rule) { r.Burst = 0 }, "", ""},
		{"valid sliding_log at cap", func(r *Rule) { r.Algorithm, r.Rate, r.Burst = AlgSlidingLog, MaxLogLimit, 0 }, "", ""},
		{"valid id chars", func(r *Rule) { r.ID = "a-Z_0.9:x" }, "", ""},
		{"valid id max len", func(r *Rule) { r.ID = strings.Repeat("a", MaxIDLen) }, "", ""},

		{"empty id", func(r *Rule) { r.ID = "" }, "id", "must not be empty"},
		{"long id", func(r *Rule) { r.ID = strings.Repeat("a", MaxIDLen+1) }, "id", "at most 128"},
		{"bad id char", func(r *Rule) { r.ID = "orders/write" }, "id", "may hold only"},
		{"id space", func(r *Rule) { r.ID = "a b" }, "id", "may hold only"},
		{"unknown algorithm", func(r *Rule) { r.Algorithm = "token-bucket" }, "algorithm", "unknown algorithm"},
		{"empty key", func(r *Rule) { r.Key = "" }, "key", "must not be empty"},
		{"unknown key", func(r *Rule) { r.Key = "cookie" }, "key", "unknown key type"},
		{"header without name", func(r *Rule) { r.Key = "header:" }, "key", "header name"},
		{"header bad name", func(r *Rule) { r.Key = "header:X Tenant" }, "key", "header name"},
		{"rate zero", func(r *Rule) { r.Rate = 0 }, "rate", "must be > 0"},
		{"rate negative", func(r *Rule) { r.Rate = -1 }, "rate", "must be > 0"},
		{"period zero", func(r *Rule) { r.Period = 0 }, "period", "must be > 0"},
		{"period negative", func(r *Rule) { r.Period = Duration(-time.Second) }, "period", "must be > 0"},
		{"burst negative", func(r *Rule) { r.Burst = -1 }, "burst", "must be >= 0"},
		{"route empty", func(r *Rule) { r.Match.Route = "" }, "match.route", "must not be empty"},
		{"route relative", func(r *Rule) { r.Match.Route = "v1/orders" }, "match.route", "must start with"},
		{"route partial param", func(r *Rule) { r.Match.Route = "/v1/user-{id}" }, "match.route", "whole {param}"},
		{"route unclosed param", func(r *Rule) { r.Match.Route = "/v1/{id" }, "match.route", "whole {param}"},
		{"route bad param name", func(r *Rule) { r.Match.Route = "/v1/{1d}" }, "match.route", "parameter name"},
		{"route empty param", func(r *Rule) { r.Match.Route = "/v1/{}" }, "match.route", "parameter name"},
		{"route duplicate param", func(r *Rule) { r.Match.Route = "/v1/{id}/x/{id}" }, "match.route", "appears twice"},
		{"route star not last", func(r *Rule) { r.Match.Route = "/v1/*/x" }, "match.route", "last segment"},
		{"route star in segment", func(r *Rule) { r.Match.Route = "/v1/ord*" }, "match.route", "whole segment"},
		{"route empty segment", func(r *Rule) { r.Match.Route = "/v1//orders" }, "match.route", "empty segment"},
		{"route query", func(r *Rule) { r.Match.Route = "/v1/orders?x=1" }, "match.route", "path only"},
		{"route dot dot", func(r *Rule) { r.Match.Route = "/v1/../admin" }, "match.route", "\"..\""},
		{"method lowercase", func(r *Rule) { r.Match.Method = "post" }, "match.method", "uppercase"},
		{"method not token", func(r *Rule) { r.Match.Method = "PO ST" }, "match.method", "uppercase"},
		{"plan not token", func(r *Rule) { r.Match.Plan = "pro plan" }, "match.plan", "plan name"},
		{"fail mode", func(r *Rule) { r.FailMode = "shut" }, "fail_mode", "must be"},
		{"timeout negative", func(r *Rule) { r.Timeout = Duration(-time.Millisecond) }, "timeout", "must be >= 0"},
		{"timeout too long", func(r *Rule) { r.Timeout = Duration(11 * time.Second) }, "timeout", "maximum"},
		{"lease below off", func(r *Rule) { r.Lease = -2 }, "lease", "want auto, off or a count ≥ 1"},
		{"lease over burst", func(r *Rule) { r.Lease = 21 }, "lease", "over the burst (20)"},
		{"lease over implied burst", func(r *Rule) { r.Burst, r.Lease = 0, 11 }, "lease", "over the burst (10)"},
		{"lease over window rate", func(r *Rule) { r.Algorithm, r.Lease = AlgFixedWindow, 15 }, "lease", "over the rate (10)"},
		{"max_keys negative", func(r *Rule) { r.MaxKeys = -1 }, "max_keys", "must be >= 0"},
		{"sliding_log over cap", func(r *Rule) { r.Algorithm, r.Rate, r.Burst = AlgSlidingLog, MaxLogLimit+1, 0 }, "rate", "sliding_log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRule()
			tt.edit(&r)
			err := r.Validate()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if err := r.Limit().Validate(MaxLogLimit); err != nil {
					t.Fatalf("valid rule's Limit() rejected by bucket: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %T, want *ValidationError", err)
			}
			if len(ve.Problems) != 1 {
				t.Fatalf("want 1 problem, got %q", ve.Problems)
			}
			p := ve.Problems[0]
			if p.Field != tt.field || !strings.Contains(p.Msg, tt.msg) || p.Line != 0 {
				t.Fatalf("problem = %+v, want field %q, msg containing %q, line 0", p, tt.field, tt.msg)
			}
		})
	}
}

func TestValidateListsEveryProblemAndDuplicates(t *testing.T) {
	a := validRule()
	b := validRule() // duplicate id
	c := validRule()
	c.ID, c.Rate, c.Key = "c", 0, "cookie"
	err := Validate([]Rule{a, b, c})
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v", err)
	}
	want := []Problem{
		{Field: "rules[1].id", Msg: `duplicate id "orders.write" (first used by rules[0])`},
		{Field: "rules[2].key", Msg: `unknown key type "cookie" (want apikey | user | ip | global | header:<Name>)`},
		{Field: "rules[2].rate", Msg: "must be > 0"},
	}
	if len(ve.Problems) != len(want) {
		t.Fatalf("problems = %q, want %q", ve.Problems, want)
	}
	for i := range want {
		if ve.Problems[i] != want[i] {
			t.Errorf("problem %d = %+v, want %+v", i, ve.Problems[i], want[i])
		}
	}
	msg := err.Error()
	for _, w := range []string{"3 problems", "rules[1].id", "rules[2].key", "rules[2].rate"} {
		if !strings.Contains(msg, w) {
			t.Errorf("Error() = %q, missing %q", msg, w)
		}
	}
	if err := Validate([]Rule{a, c}[:1]); err != nil {
		t.Fatalf("Validate(valid) = %v", err)
	}
}

func TestNormalizeAndLimit(t *testing.T) {
	r := Rule{ID: "x", Match: Match{Route: "/x"}, Key: "header:x-tenant-id", Rate: 7, Period: Duration(time.Minute)}
	n := Normalize(r)
	want := Rule{ID: "x", Match: Match{Route: "/x", Method: "*", Plan: "*"}, Key: "header:X-Tenant-Id",
		Algorithm: AlgTokenBucket, Rate: 7, Period: Duration(time.Minute), Burst: 7, FailMode: FailOpen,
		Timeout: Duration(DefaultTimeout)}
	if !n.Equal(want) {
		t.Fatalf("Normalize = %+v\nwant %+v", n, want)
	}
	if !Normalize(n).Equal(n) {
		t.Fatal("Normalize is not idempotent")
	}
	lim := r.Limit()
	if lim.Rate != 7 || lim.Burst != 7 || lim.Period != time.Minute {
		t.Fatalf("Limit = %+v", lim)
	}
	r.Algorithm = AlgSlidingLog
	r.Burst = 3
	lim2 := r.Limit()
	if lim2.Algorithm == lim.Algorithm || lim2.Burst != 3 {
		t.Fatalf("Limit with sliding_log, burst 3 = %+v (token bucket gave %+v)", lim2, lim)
	}
}

func TestDurationString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", time.Second: "1s",
		5 * time.Millisecond: "5ms", 61 * time.Second: "1m1s", 0: "0s",
	} {
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(Duration(d).String()); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v", Duration(d).String(), back, err)
		}
	}
}

func TestRequestCost(t *testing.T) {
	bulk := &Rule{ID: "bulk", Cost: 50}
	plain := &Rule{ID: "plain"}
	metered := &Rule{ID: "metered", CostHeader: "X-Cost"}
	hdr := func(v string) func(string) string {
		return func(name string) string {
			if name == "X-Cost" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		rules []*Rule
		h     func(string) string
		want  int64
		bad   bool
	}{
		{[]*Rule{plain}, nil, 1, false},
		{[]*Rule{plain, bulk}, nil, 50, false},
		{[]*Rule{metered}, hdr(""), 1, false},
		{[]*Rule{metered}, hdr("7"), 7, false},
		{[]*Rule{metered, bulk}, hdr("7"), 50, false},
		{[]*Rule{metered}, hdr("1000000"), 1000000, false},
		{[]*Rule{metered}, hdr("0"), 0, true},
		{[]*Rule{metered}, hdr("x"), 0, true},
		{[]*Rule{metered}, hdr("1000001"), 0, true},
	} {
		got, err := RequestCost(tc.rules, tc.h)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) || (tc.bad && !errors.Is(err, ErrBadCost)) {
			t.Errorf("%v: %d, %v; want %d (bad %v)", tc.rules, got, err, tc.want, tc.bad)
		}
	}
}

func TestValidateCost(t *testing.T) {
	base := Rule{ID: "r", Match: Match{Route: "/x"}, Key: KeyAPIKey, Rate: 10, Period: Duration(time.Second), Burst: 20}
	for _, tc := range []struct {
		mod   func(*Rule)
		field string
	}{
		{func(r *Rule) { r.Cost = -1 }, "cost"},
		{func(r *Rule) { r.Cost = 21 }, "cost"},
		{func(r *Rule) { r.Cost = MaxCost + 1 }, "cost"},
		{func(r *Rule) { r.CostHeader = "X Cost" }, "cost_header"},
	} {
		r := base
		tc.mod(&r)
		if err := Validate([]Rule{r}); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want a problem with %s", r, err, tc.field)
		}
	}
	ok := base
	ok.Cost, ok.CostHeader = 20, "X-Cost"
	if err := Validate([]Rule{ok}); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
}
