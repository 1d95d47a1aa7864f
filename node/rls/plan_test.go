package rls

import (
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func TestValidate(t *testing.T) {
	ok := Descriptor{Entries: []rules.Entry{{Key: "k", Value: "v"}}}
	for _, tc := range []struct {
		name string
		r    Request
		want string // "" valid; else a fragment of the error
	}{
		{"valid", Request{Domain: "d", Descriptors: []Descriptor{ok}}, ""},
		{"empty domain", Request{Descriptors: []Descriptor{ok}}, "domain: must not be empty"},
		{"long domain", Request{Domain: strings.Repeat("d", 200), Descriptors: []Descriptor{ok}}, "domain: is 200 bytes"},
		{"bad UTF-8 domain", Request{Domain: "\xff", Descriptors: []Descriptor{ok}}, "UTF-8"},
		{"no descriptors", Request{Domain: "d"}, "none given"},
		{"too many", Request{Domain: "d", Descriptors: make([]Descriptor, MaxDescriptors+1)}, "at most 256"},
		{"empty descriptor", Request{Domain: "d", Descriptors: []Descriptor{{}}}, "has no entries"},
		{"empty key", Request{Domain: "d", Descriptors: []Descriptor{{Entries: []rules.Entry{{Value: "v"}}}}}, "key: must not be empty"},
		{"bad UTF-8 value", Request{Domain: "d", Descriptors: []Descriptor{{Entries: []rules.Entry{{Key: "k", Value: "\xfe"}}}}}, "UTF-8"},
		{"huge value", Request{Domain: "d", Descriptors: []Descriptor{{Entries: []rules.Entry{{Key: "k", Value: strings.Repeat("v", MaxValueLen+1)}}}}}, "at most 4096"},
		{"huge request hits", Request{Domain: "d", Hits: MaxHits + 1, Descriptors: []Descriptor{ok}}, "hits_addend"},
		{"huge descriptor hits", Request{Domain: "d", Descriptors: []Descriptor{{Entries: ok.Entries, Hits: MaxHits + 1, HasHits: true}}}, "hits_addend"},
		{"override", Request{Domain: "d", Descriptors: []Descriptor{{Entries: ok.Entries, Override: &Override{RequestsPerUnit: 3, Unit: time.Second}}}}, ""},
		{"override of 0", Request{Domain: "d", Descriptors: []Descriptor{{Entries: ok.Entries, Override: &Override{Unit: time.Second}}}}, "requests_per_unit: must be > 0"},
		{"override in months", Request{Domain: "d", Descriptors: []Descriptor{{Entries: ok.Entries, Override: &Override{RequestsPerUnit: 3}}}}, "unit must be"},
		{"override over a year", Request{Domain: "d", Descriptors: []Descriptor{{Entries: ok.Entries, Override: &Override{RequestsPerUnit: 3, Unit: 24 * time.Hour, Multiplier: 400}}}}, "at most a year"},
	} {
		err := validate(&tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestPlanAndAnswer(t *testing.T) {
	rs := []rules.Rule{
		{ID: "ip", Match: rules.Match{Domain: "d", Descriptor: []rules.Entry{{Key: "ip"}}}, Rate: 5, Period: rules.Duration(time.Minute)},
		{ID: "ip.day", Match: rules.Match{Domain: "d", Descriptor: []rules.Entry{{Key: "ip"}}}, Rate: 100, Period: rules.Duration(24 * time.Hour)},
		{ID: "user", Match: rules.Match{Domain: "d", Descriptor: []rules.Entry{{Key: "user"}}}, Rate: 2, Period: rules.Duration(time.Second), Shadow: true},
		{ID: "closed", Match: rules.Match{Domain: "d", Descriptor: []rules.Entry{{Key: "c"}}}, Rate: 2, Period: rules.Duration(time.Second), FailMode: rules.FailClosed},
	}
	m, err := rules.CompileDescriptors(rs)
	if err != nil {
		t.Fatal(err)
	}
	r := &Request{Domain: "d", Hits: 2, Descriptors: []Descriptor{
		{Entries: []rules.Entry{{Key: "ip", Value: "1.2.3.4"}}},
		{Entries: []rules.Entry{{Key: "user", Value: "u"}}, Hits: 0, HasHits: true},
		{Entries: []rules.Entry{{Key: "nope", Value: "x"}}},
		{Entries: []rules.Entry{{Key: "c", Value: "x"}}, Negative: true},
	}}
	items, where, _ := plan(m, r, true)
	want := []limit.Item{
		{Key: "rls:d|ip=1.2.3.4", Rule: "ip", Cost: 2, Group: 1},
		{Key: "rls:d|ip=1.2.3.4", Rule: "ip.day", Cost: 2, Group: 1},
		{Key: "rls:d|user=u", Rule: "user", Cost: 0, Group: 1},
		{Key: "rls:d|c=x", Rule: "closed", Cost: 2, Group: 1, Refund: true},
	}
	if len(items) != len(want) {
		t.Fatalf("items %+v", items)
	}
	for i := range want {
		if items[i] != want[i] {
			t.Errorf("item %d: %+v, want %+v", i, items[i], want[i])
		}
	}
	if items2, _, _ := plan(m, r, false); items2[0].Group != 1 || items2[2].Group != 2 || items2[3].Group != 4 {
		t.Errorf("each descriptor its own group: %+v", items2)
	}
	// ip: the minute window denies (30s wait), the day window has fewer
	// remaining… the denying one is reported. user: shadow, denied, OK.
	// closed: its owner did not answer; fail closed.
	res := []limit.Result{
		{Allowed: false, Limit: 5, Remaining: 1, RetryAfter: 30 * time.Second, Reset: 40 * time.Second, Window: time.Minute},
		{Allowed: false, Voided: true, Limit: 100, Remaining: 0, Window: 24 * time.Hour},
		{Allowed: false, Shadow: true, Limit: 2, Remaining: 0, RetryAfter: time.Second, Window: time.Second},
		{Code: limit.CodeUnavailable},
	}
	out := answer(r, items, where, nil, res, "draft")
	if out.Overall != OverLimit {
		t.Fatalf("overall %v", out.Overall)
	}
	st := out.Statuses
	if st[0].Code != OverLimit || st[0].Rule != "ip" || st[0].RetryAfter != 30*time.Second {
		t.Errorf("ip status %+v", st[0])
	}
	if st[1].Code != OK || st[1].Rule != "user" || !st[1].Shadow {
		t.Errorf("shadow status %+v", st[1])
	}
	if st[2].Code != OK || st[2].Rule != "" {
		t.Errorf("unmatched status %+v", st[2])
	}
	if st[3].Code != OverLimit || st[3].Rule != "closed" {
		t.Errorf("fail-closed status %+v", st[3])
	}
	got := map[string]string{}
	for _, h := range out.Headers {
		got[h.Name] = h.Value
	}
	if got["Retry-After"] != "30" || got["RateLimit-Limit"] != "5" || got["RateLimit-Remaining"] != "1" || got["RateLimit-Reset"] != "40" {
		t.Errorf("headers %v", got)
	}
}

func TestDescriptorKey(t *testing.T) {
	if k := descriptorKey("d", []rules.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}}); k != "rls:d|a=1|b=2" {
		t.Errorf("key %q", k)
	}
	long := descriptorKey("d", []rules.Entry{{Key: "a", Value: strings.Repeat("x", 300)}})
	if len(long) > limit.MaxKeyLen || !strings.HasPrefix(long, "rls:d|~") {
		t.Errorf("long key %q", long)
	}
	if long == descriptorKey("d", []rules.Entry{{Key: "a", Value: strings.Repeat("x", 301)}}) {
		t.Error("two long values share a key")
	}
}

func TestParseTrust(t *testing.T) {
	for in, want := range map[string]Trust{
		"": {}, "negative-hits": {NegativeHits: true}, "overrides": {Overrides: true},
		"negative-hits, overrides": {NegativeHits: true, Overrides: true},
	} {
		got, err := ParseTrust(in)
		if err != nil || got != want {
			t.Fatalf("ParseTrust(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, _ := ParseTrust(got.String()); back != got {
			t.Fatalf("String %q does not read back", got.String())
		}
	}
	if _, err := ParseTrust("overrides,refunds"); err == nil || !strings.Contains(err.Error(), `"refunds"`) {
		t.Fatalf("unknown word: %v", err)
	}
}
