package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func drule(id, domain string, unlimited bool, pattern ...string) Rule {
	r := Rule{ID: id, Match: Match{Domain: domain}, Rate: 10, Period: Duration(1e9)}
	if unlimited {
		r.Rate, r.Period, r.Unlimited = 0, 0, true
	}
	for _, p := range pattern {
		k, v, _ := strings.Cut(p, "=")
		r.Match.Descriptor = append(r.Match.Descriptor, Entry{Key: k, Value: v})
	}
	return r
}

func entries(ps ...string) []Entry {
	var out []Entry
	for _, p := range ps {
		k, v, _ := strings.Cut(p, "=")
		out = append(out, Entry{Key: k, Value: v})
	}
	return out
}

func TestDescriptorMatch(t *testing.T) {
	rs := []Rule{
		drule("any-addr", "edge", false, "remote_address"),
		drule("addr-local", "edge", false, "remote_address=10.0.0.1"),
		drule("addr-local-2", "edge", false, "remote_address=10.0.0.1"),
		drule("path-v1", "edge", false, "path=/v1/*"),
		drule("path-v1-orders", "edge", false, "path=/v1/orders*"),
		drule("path-star", "edge", false, "path=*"),
		drule("nested-any", "edge", false, "tenant", "plan"),
		drule("nested-gold", "edge", false, "tenant", "plan=gold"),
		drule("free-unlimited", "edge", true, "tenant", "plan=free"),
		drule("other-domain", "mail", false, "remote_address"),
		drule("http-rule", "", false),
	}
	rs[len(rs)-1].Match.Route, rs[len(rs)-1].Key, rs[len(rs)-1].Match.Descriptor = "/v1/*", KeyIP, nil
	m, err := CompileDescriptors(rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    []string
	}{
		{"key only matches any value", "edge", entries("remote_address=10.9.9.9"), []string{"any-addr"}},
		{"exact value beats key only; equal patterns all apply", "edge", entries("remote_address=10.0.0.1"), []string{"addr-local", "addr-local-2"}},
		{"longer prefix beats shorter and star", "edge", entries("path=/v1/orders/7"), []string{"path-v1-orders"}},
		{"prefix beats star", "edge", entries("path=/v1/users"), []string{"path-v1"}},
		{"star matches the rest", "edge", entries("path=/v2"), []string{"path-star"}},
		{"nested exact", "edge", entries("tenant=a", "plan=gold"), []string{"nested-gold"}},
		{"nested key only", "edge", entries("tenant=a", "plan=silver"), []string{"nested-any"}},
		{"unlimited wins and is returned", "edge", entries("tenant=a", "plan=free"), []string{"free-unlimited"}},
		{"a shorter descriptor matches no deeper rule", "edge", entries("tenant=a"), nil},
		{"a longer descriptor matches no shallower rule", "edge", entries("remote_address=1", "x=y"), nil},
		{"wrong key order", "edge", entries("plan=gold", "tenant=a"), nil},
		{"unknown descriptor key", "edge", entries("user=1"), nil},
		{"unknown domain", "nope", entries("remote_address=1"), nil},
		{"domains are separate", "mail", entries("remote_address=1"), []string{"other-domain"}},
		{"no entries", "edge", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range m.Match(tc.domain, tc.entries, nil) {
				got = append(got, r.ID)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Match(%q, %v) = %v, want %v", tc.domain, tc.entries, got, tc.want)
			}
		})
	}
	// HTTP matching ignores descriptor rules, and descriptor matching HTTP rules.
	hm, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	if got := hm.Match("/v1/orders", "GET", "*", nil); len(got) != 1 || got[0].ID != "http-rule" {
		t.Fatalf("HTTP Match = %v, want only http-rule", got)
	}
	if !m.HasDomain("edge") || m.HasDomain("") || m.HasDomain("nope") {
		t.Fatal("HasDomain is wrong")
	}
}

func TestReplaced(t *testing.T) {
	a := drule("a", "edge", false, "k")
	b := drule("b", "edge", false, "k2")
	b.Replaces = []string{"a", "zzz"}
	got := Replaced([]*Rule{&a, &b})
	if !reflect.DeepEqual(got, map[string]bool{"a": true, "zzz": true}) {
		t.Fatalf("Replaced = %v", got)
	}
	if Replaced([]*Rule{&a}) != nil {
		t.Fatal("nothing replaces a")
	}
}

func TestValidateDescriptorRules(t *testing.T) {
	ok := drule("ok", "edge", false, "k=v")
	for _, tc := range []struct {
		name  string
		edit  func(r *Rule)
		field string
	}{
		{"valid", func(r *Rule) {}, ""},
		{"valid unlimited", func(r *Rule) { r.Rate, r.Period, r.Unlimited = 0, 0, true }, ""},
		{"valid key descriptor", func(r *Rule) { r.Key = KeyDescriptor }, ""},
		{"no entries", func(r *Rule) { r.Match.Descriptor = nil }, "match.descriptor"},
		{"empty entry key", func(r *Rule) { r.Match.Descriptor[0].Key = "" }, "match.descriptor[0].key"},
		{"star inside value", func(r *Rule) { r.Match.Descriptor[0].Value = "a*b" }, "match.descriptor[0].value"},
		{"too many entries", func(r *Rule) { r.Match.Descriptor = make([]Entry, MaxDescriptorEntries+1) }, "match.descriptor"},
		{"route with domain", func(r *Rule) { r.Match.Route = "/v1" }, "match"},
		{"other key type", func(r *Rule) { r.Key = KeyIP }, "key"},
		{"unlimited with rate", func(r *Rule) { r.Unlimited = true }, "unlimited"},
		{"replaces itself", func(r *Rule) { r.Replaces = []string{"ok"} }, "replaces[0]"},
		{"replaces twice", func(r *Rule) { r.Replaces = []string{"a", "a"} }, "replaces[1]"},
		{"descriptor without domain", func(r *Rule) { r.Match.Domain, r.Match.Route, r.Key = "", "/v1", KeyIP }, "match.descriptor"},
		{"descriptor key without domain", func(r *Rule) {
			r.Match.Domain, r.Match.Route, r.Key, r.Match.Descriptor = "", "/v1", KeyDescriptor, nil
		}, "key"},
		{"long domain", func(r *Rule) { r.Match.Domain = strings.Repeat("d", MaxDomainLen+1) }, "match.domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			r.Match.Descriptor = append([]Entry(nil), ok.Match.Descriptor...)
			tc.edit(&r)
			err := r.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if n := Normalize(r); n.Key != KeyDescriptor || n.Match.Method != "" || n.Match.Plan != "" {
					t.Fatalf("Normalize = %+v", n)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a ValidationError on %s, got %v", tc.field, err)
			}
			for _, p := range ve.Problems {
				if p.Field == tc.field {
					return
				}
			}
			t.Fatalf("want a problem on %s, got %v", tc.field, err)
		})
	}
}

func TestParseDescriptorRule(t *testing.T) {
	src := `rules:
  - id: edge.addr
    match:
      domain: edge
      descriptor:
        - key: remote_address
        - {key: path, value: /v1/*}
    algorithm: sliding_window
    rate: 100
    period: 1m
    shadow: true
    replaces: [edge.generic]
  - id: edge.free
    match: {domain: edge, descriptor: [{key: plan, value: free}]}
    unlimited: true
`
	rs, err := ParseFile([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Rule{ID: "edge.addr", Match: Match{Domain: "edge", Descriptor: entries("remote_address", "path=/v1/*")},
		Algorithm: AlgSlidingWindow, Rate: 100, Period: Duration(60e9), Shadow: true, Replaces: []string{"edge.generic"}}
	if len(rs) != 2 || !rs[0].Equal(Normalize(want)) || !rs[1].Unlimited {
		t.Fatalf("ParseFile = %+v", rs)
	}
	out, err := MarshalFile(rs)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseFile(out)
	if err != nil || len(back) != 2 || !back[0].Equal(rs[0]) || !back[1].Equal(rs[1]) {
		t.Fatalf("round trip: %v\n%s\n%+v", err, out, back)
	}
	if _, err := ParseFile([]byte("rules:\n  - id: x\n    match: {domain: edge, descriptor: [{key: a, bogus: 1}]}\n    rate: 1\n    period: 1s\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown entry field: %v", err)
	}
}
