package rulespb

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func sampleRule() rules.Rule {
	return rules.Rule{
		ID:        "orders.write",
		Match:     rules.Match{Route: "/v1/orders", Method: "POST", Plan: "*"},
		Key:       "apikey",
		Algorithm: "token_bucket",
		Rate:      10,
		Period:    rules.Duration(time.Second),
		Burst:     20,
		FailMode:  "open",
		Timeout:   rules.Duration(5 * time.Millisecond),
		Shadow:    true,
		Lease:     2,
		MaxKeys:   50_000,
		Scope:     "global",
	}
}

func TestRuleRoundTrip(t *testing.T) {
	desc := rules.Rule{ID: "edge.addr", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "remote_address"}, {Key: "path", Value: "/v1/*"}}},
		Key: "descriptor", Rate: 5, Period: rules.Duration(time.Minute), Replaces: []string{"edge.generic"}}
	free := rules.Rule{ID: "edge.free", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "plan", Value: "free"}}}, Unlimited: true}
	month := rules.Rule{ID: "plan.month", Match: rules.Match{Route: "/v1/reports"}, Key: "apikey", Algorithm: "fixed_window", Rate: 10000,
		Calendar: "month", Timezone: "Europe/Berlin"}
	for _, r := range []rules.Rule{sampleRule(), {ID: "bare", Match: rules.Match{Route: "/"}, Key: "ip", Rate: 1, Period: rules.Duration(90 * time.Minute)}, desc, free, month} {
		p := RuleToProto(r)
		got, err := RuleFromProto(p)
		if err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
	if p := RuleToProto(sampleRule()); p.Period != "1s" || p.Timeout != "5ms" {
		t.Errorf("durations on the wire: period %q timeout %q", p.Period, p.Timeout)
	}
	if p := RuleToProto(rules.Rule{ID: "x"}); p.Period != "" || p.Timeout != "" {
		t.Errorf("zero durations must stay absent: %q %q", p.Period, p.Timeout)
	}
}

func TestRuleFromProtoProblems(t *testing.T) {
	_, err := RuleFromProto(&weirv1.Rule{Id: "x", Period: "soon", Timeout: "5 parsecs"})
	var ve *rules.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("want a *rules.ValidationError, got %v", err)
	}
	if len(ve.Problems) != 2 || ve.Problems[0].Field != "period" || ve.Problems[1].Field != "timeout" {
		t.Errorf("problems: %+v", ve.Problems)
	}
	if _, err := RuleFromProto(nil); !errors.Is(err, rules.ErrInvalid) {
		t.Errorf("nil rule: %v", err)
	}
	_, err = RulesFromProto([]*weirv1.Rule{{Id: "a"}, nil, {Id: "c", Period: "x"}})
	if err == nil || !strings.Contains(err.Error(), "rules[1]: missing") || !strings.Contains(err.Error(), "rules[2].period") {
		t.Errorf("list problems: %v", err)
	}
}

func TestOverrideRoundTrip(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	for _, o := range []rules.Override{
		{Key: "apikey:ak_1", Rule: "orders.write", Rate: 100, Burst: 200, ExpiresAt: exp},
		{Key: "ip:10.0.0.1", Rule: "r", Block: true},
	} {
		p := OverrideToProto(o)
		got, err := OverrideFromProto(p)
		if err != nil {
			t.Fatal(err)
		}
		if !got.ExpiresAt.Equal(o.ExpiresAt) || got.ExpiresAt.IsZero() != o.ExpiresAt.IsZero() {
			t.Errorf("expiry %v -> %v", o.ExpiresAt, got.ExpiresAt)
		}
		got.ExpiresAt, o.ExpiresAt = time.Time{}, time.Time{}
		if got != o {
			t.Errorf("round trip: got %+v want %+v", got, o)
		}
	}
	if p := OverrideToProto(rules.Override{Key: "k", Rule: "r"}); p.ExpiresAtMs != 0 {
		t.Errorf("never-expiring override sent as %d", p.ExpiresAtMs)
	}
}

func TestSetRoundTrip(t *testing.T) {
	b := sampleRule()
	b.ID = "a.first"
	s := rules.NewSet(42, []rules.Rule{sampleRule(), b}, []rules.Override{{Key: "k", Rule: "orders.write", Rate: 5}})
	p := SetToProto(s)
	if p.Version != 42 || len(p.Rules) != 2 || p.Rules[0].Id != "a.first" || len(p.Overrides) != 1 {
		t.Fatalf("proto set: %v", p)
	}
	got, err := SetFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if e := SetToProto(nil); e.Version != 0 || len(e.Rules) != 0 {
		t.Errorf("nil set: %v", e)
	}
	if _, err := SetFromProto(nil); !errors.Is(err, rules.ErrInvalid) {
		t.Errorf("nil proto set: %v", err)
	}
}

// Every lease setting survives the wire (a count in lease, off in
// lease_mode, auto as neither); an unknown mode reads as a lease Validate
// refuses.
func TestLeaseOnTheWire(t *testing.T) {
	for _, l := range []rules.Lease{rules.LeaseAuto, rules.LeaseOff, 1, 20} {
		r := rules.Rule{ID: "a", Match: rules.Match{Route: "/"}, Key: "ip", Rate: 100, Period: rules.Duration(time.Second), Lease: l}
		got, err := RuleFromProto(RuleToProto(r))
		if err != nil || got.Lease != l {
			t.Fatalf("lease %v came back as %v (%v)", l, got.Lease, err)
		}
	}
	if p := RuleToProto(rules.Rule{ID: "a", Lease: rules.LeaseOff}); p.Lease != 0 || p.LeaseMode != "off" {
		t.Fatalf("off on the wire: lease %d mode %q", p.Lease, p.LeaseMode)
	}
	if got, _ := RuleFromProto(&weirv1.Rule{Id: "a", LeaseMode: "auto"}); got.Lease != rules.LeaseAuto {
		t.Fatalf("lease_mode auto: %v", got.Lease)
	}
	got, err := RuleFromProto(&weirv1.Rule{Id: "a", Match: &weirv1.Match{Route: "/"}, Key: "ip", Rate: 1, Period: "1s", LeaseMode: "sometimes"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.Validate([]rules.Rule{got}); err == nil || !strings.Contains(err.Error(), "want auto, off or a count ≥ 1") {
		t.Fatalf("lease_mode sometimes: Validate = %v", err)
	}
}
