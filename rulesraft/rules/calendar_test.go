package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // as cmd/weir embeds it

	"github.com/weirlimit/weir/bucket"
)

const calendarRuleYAML = `rules:
  - id: plan.month
    match: {route: /v1/reports}
    key: apikey
    algorithm: fixed_window
    rate: 10000
`

// A calendar rule parses, normalizes (timezone UTC when left out) and
// compiles to a calendar limit with its zone loaded.
func TestParseCalendarRule(t *testing.T) {
	rs, err := ParseFile([]byte(calendarRuleYAML + "    calendar: month\n    timezone: Europe/Berlin\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Calendar != "month" || r.Timezone != "Europe/Berlin" || r.Period != 0 {
		t.Fatalf("parsed %+v", r)
	}
	lim := r.Limit()
	if lim.Calendar == nil || lim.Calendar.Unit != bucket.Month || lim.Calendar.Zone.String() != "Europe/Berlin" ||
		lim.Period != 30*24*time.Hour || lim.Algorithm != bucket.FixedWindow {
		t.Fatalf("limit %+v", lim)
	}
	if r.Window() != 30*24*time.Hour || r.Leasable() {
		t.Fatalf("window %v, leasable %v", r.Window(), r.Leasable())
	}
	rs, err = ParseFile([]byte(calendarRuleYAML + "    calendar: day\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := Normalize(rs[0]); n.Timezone != DefaultTimezone || n.Limit().Calendar.Zone != time.UTC {
		t.Fatalf("a day in no zone: %+v", n)
	}
	// JSON (the HTTP API, the Raft log) keeps both fields.
	b, _ := json.Marshal(r)
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(r) {
		t.Fatalf("JSON round trip: %s -> %+v, %v", b, back, err)
	}
}

// Every wrong use is refused with the field, its line and what to do.
func TestParseCalendarErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml, field, msg string
	}{
		{"    calendar: quarter\n", "calendar", `"quarter": want day, week, month or year`},
		{"    calendar: Month\n", "calendar", "want day, week, month or year"},
		{"    calendar: month\n    period: 720h\n", "period", "give period (a Go duration) or calendar"},
		{"    calendar: month\n    timezone: Mars/Olympus\n", "timezone", `"Mars/Olympus": not a time zone`},
		{"    calendar: month\n    timezone: Local\n", "timezone", "differs between nodes"},
		{"    period: 24h\n    timezone: Europe/Berlin\n", "timezone", "applies to calendar windows only"},
		{"    calendar: month\n    lease: 10\n", "lease", "is never leased"},
	} {
		_, err := ParseFile([]byte(calendarRuleYAML + tc.yaml))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%q: %v, want a validation error", tc.yaml, err)
			continue
		}
		found := false
		for _, p := range ve.Problems {
			if p.Field == "rules[0]."+tc.field && strings.Contains(p.Msg, tc.msg) && p.Line > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: %v\nwant rules[0].%s: ...%s...", tc.yaml, err, tc.field, tc.msg)
		}
	}
	// A calendar needs fixed_window, also when the algorithm is left out.
	for _, alg := range []string{"", "    algorithm: token_bucket\n", "    algorithm: sliding_window\n"} {
		src := strings.Replace(calendarRuleYAML, "    algorithm: fixed_window\n", alg, 1) + "    calendar: day\n"
		_, err := ParseFile([]byte(src))
		if err == nil || !strings.Contains(err.Error(), "rules[0].calendar: calendar windows need algorithm: fixed_window") {
			t.Errorf("%q: %v", alg, err)
		}
	}
}

// A fixed lease on a period of an hour or more is refused on write
// (CheckWrite) but stays valid for Validate, which the FSM runs again on
// every replayed command: a log written by an older version that stored
// one must replay to the same rule set.
func TestCheckWriteRefusesLongFixedLeases(t *testing.T) {
	rs, err := ParseFile([]byte(calendarRuleYAML + "    period: 1h\n    lease: 10\n  - {id: ok, match: {route: /ok}, key: ip, rate: 5, period: 59m, lease: 5}\n"))
	if err != nil {
		t.Fatalf("a fixed lease on 1h must stay valid for Validate: %v", err)
	}
	err = CheckWrite(rs)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "rules[0].lease" ||
		!strings.Contains(ve.Problems[0].Msg, "is never leased") {
		t.Fatalf("CheckWrite: %v, want one problem on rules[0].lease", err)
	}
	if err := CheckWrite(rs[1:]); err != nil {
		t.Fatalf("59m with a lease: %v", err)
	}
}

// Leases: a fixed lease is refused on long windows (above), and Leasable
// says no for them whatever the lease, so a node and the SDK never lease
// them automatically either.
func TestLongWindowsAreNotLeasable(t *testing.T) {
	for _, tc := range []struct {
		r    Rule
		want bool
	}{
		{Rule{Period: Duration(time.Second)}, true},
		{Rule{Period: Duration(59 * time.Minute)}, true},
		{Rule{Period: Duration(time.Hour)}, false},
		{Rule{Period: Duration(24 * time.Hour)}, false},
		{Rule{Calendar: "day"}, false},
	} {
		if got := tc.r.Leasable(); got != tc.want {
			t.Errorf("%+v: Leasable %v", tc.r, got)
		}
	}
	for _, l := range []Lease{LeaseAuto, LeaseOff} {
		r := Rule{ID: "a", Match: Match{Route: "/a"}, Key: KeyAPIKey, Algorithm: AlgFixedWindow, Rate: 10, Calendar: "month", Lease: l}
		if err := r.Validate(); err != nil {
			t.Errorf("lease %v on a calendar rule: %v", l, err)
		}
	}
}
