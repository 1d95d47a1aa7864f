package rules

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func parseProblems(t *testing.T, src string) []Problem {
	t.Helper()
	rs, err := ParseFile([]byte(src))
	if err == nil {
		t.Fatalf("ParseFile accepted the file: %+v", rs)
	}
	if rs != nil {
		t.Fatalf("ParseFile returned rules with an error: %+v", rs)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v is not ErrInvalid", err)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T is not *ValidationError", err)
	}
	return ve.Problems
}

func TestParseFileListsEveryProblemWithLines(t *testing.T) {
	src := `rules:
  - id: ok
    match: {route: /v1/ok, method: GET}
    key: apikey
    rate: 10
    period: 1s
  - id: bad rate
    match: {route: /v1/x, method: get}
    key: apikey
    rate: 0
    period: 1s
    colour: red
  - id: ok
    match:
      route: /v1/{id
      plan: "*"
    key: cookie
    rate: ten
    period: 5
    timeout: 1m
  - match: {route: /v1/y, verb: GET}
    key: ip
    rate: 5
    period: 1m
    burst: 2
    lease: 3
`
	got := parseProblems(t, src)
	want := []Problem{
		{7, "rules[1].id", `"bad rate": may hold only letters, digits and . _ : -`},
		{8, "rules[1].match.method", `"get": must be "*" or an uppercase HTTP method such as GET`},
		{10, "rules[1].rate", "must be > 0"},
		{12, "rules[1].colour", "unknown field (want id, match, key, algorithm, rate, period, calendar, timezone, burst, fail_mode, timeout, shadow, lease, max_keys, cost, cost_header, scope, events, replaces, unlimited, durable, limit, permit_ttl, priority_header, priority_default, reserve)"},
		{13, "rules[2].id", `duplicate id "ok" (first used by rules[0] at line 2)`},
		{15, "rules[2].match.route", `"/v1/{id": segment "{id" must be a whole {param}`},
		{17, "rules[2].key", `unknown key type "cookie" (want apikey | user | ip | global | header:<Name>)`},
		{18, "rules[2].rate", `must be a whole number, got "ten"`},
		{19, "rules[2].period", `invalid duration "5" (use a Go duration such as 1s, 30s, 5m, 1h, 24h)`},
		{20, "rules[2].timeout", "1m is over the maximum of 10s"},
		{21, "rules[3].match.verb", "unknown field (want route, method, plan, domain, descriptor)"},
		{21, "rules[3].id", "must not be empty"},
		{26, "rules[3].lease", "3 is over the burst (2): a gateway may not hold more than the bucket"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", fmtProblems(got), fmtProblems(want))
	}
	_, err := ParseFile([]byte(src))
	msg := err.Error()
	if !strings.Contains(msg, "13 problems") || !strings.Contains(msg, "line 10: rules[1].rate: must be > 0") {
		t.Fatalf("Error() = %s", msg)
	}
}

func fmtProblems(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

const secondDoc = `a second YAML document starts here ("---"); a rules file holds one document: put every rule in one "rules:" list`

func TestParseFileDocumentProblems(t *testing.T) {
	tests := []struct {
		name, src string
		want      Problem
	}{
		{"empty", "", Problem{Msg: `file is empty; want a top-level "rules:" list`}},
		{"comment only", "# nothing\n", Problem{Msg: `file is empty; want a top-level "rules:" list`}},
		{"not a mapping", "- a\n- b\n", Problem{Line: 1, Msg: `the top level must be a mapping holding a "rules:" list`}},
		{"missing rules", "rulez: []\n", Problem{Line: 1, Field: "rulez", Msg: `unknown field (the top level holds only "rules")`}},
		{"rules not a list", "rules: {a: 1}\n", Problem{Line: 1, Field: "rules", Msg: "must be a list of rules"}},
		{"rule not a mapping", "rules:\n  - 7\n", Problem{Line: 2, Field: "rules[0]", Msg: "must be a mapping (id: ..., match: ..., key: ...)"}},
		{"syntax", "rules:\n  - id: a\n    key: b: c\n", Problem{Line: 3, Msg: "not valid YAML: mapping values are not allowed in this context"}},
		{"bare star", "rules:\n  - match: {plan: *}\n", Problem{Line: 2}},
		{"duplicate field", "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 1, period: 1s,\n     id: b}\n", Problem{Line: 3, Field: "rules[0].id", Msg: "appears twice (first at line 2)"}},
		{"match not a mapping", "rules:\n  - {id: a, match: /v1, key: ip, rate: 1, period: 1s}\n", Problem{Line: 2, Field: "rules[0].match", Msg: "must be a mapping such as {route: /v1/orders, method: POST}"}},
		{"shadow not bool", "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 1, period: 1s, shadow: yes}\n", Problem{Line: 2, Field: "rules[0].shadow", Msg: `must be true or false, got "yes"`}},
		{"rate float", "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 1.5, period: 1s}\n", Problem{Line: 2, Field: "rules[0].rate", Msg: `must be a whole number, got "1.5"`}},
		{"rate quoted", "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: \"1\", period: 1s}\n", Problem{Line: 2, Field: "rules[0].rate", Msg: `must be a whole number, got "1"`}},
		{"id a list", "rules:\n  - {id: [a], match: {route: /a}, key: ip, rate: 1, period: 1s}\n", Problem{Line: 2, Field: "rules[0].id", Msg: "must be a string"}},
		// A second document used to be dropped in silence, with its rules.
		{"second document", "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 1, period: 1s}\n---\nrules:\n  - {id: b, match: {route: /b}, key: ip, rate: 1, period: 1s}\n", Problem{Line: 3, Msg: secondDoc}},
		{"second document after a leading marker", "---\nrules: []\n# more\n---\nrules: []\n", Problem{Line: 4, Msg: secondDoc}},
		{"empty second document", "rules: []\n---\n", Problem{Line: 2, Msg: secondDoc}},
		{"second document not YAML", "rules: []\n---\nkey: b: c\n", Problem{Line: 3, Msg: "not valid YAML: mapping values are not allowed in this context"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseProblems(t, tt.src)
			if tt.name == "missing rules" {
				if len(got) != 2 || got[1] != (Problem{Line: 1, Field: "rules", Msg: "missing"}) {
					t.Fatalf("problems = %q", got)
				}
				got = got[:1]
			}
			if len(got) != 1 {
				t.Fatalf("problems = %q, want one", got)
			}
			if tt.want.Msg == "" { // only the line is asserted
				if got[0].Line != tt.want.Line {
					t.Fatalf("problem = %+v, want line %d", got[0], tt.want.Line)
				}
				return
			}
			if got[0] != tt.want {
				t.Fatalf("problem = %+v\nwant      %+v", got[0], tt.want)
			}
		})
	}
}

func TestParseFileNormalizesAndAcceptsJSON(t *testing.T) {
	want := []Rule{{
		ID: "a", Match: Match{Route: "/v1/a", Method: "*", Plan: "*"}, Key: "header:X-Tenant",
		Algorithm: AlgTokenBucket, Rate: 3, Period: Duration(time.Minute), Burst: 3,
		FailMode: FailOpen, Timeout: Duration(DefaultTimeout),
	}}
	yamlSrc := "rules:\n  - id: a\n    match: {route: /v1/a}\n    key: header:x-tenant\n    rate: 3\n    period: 1m\n"
	jsonSrc := `{"rules": [{"id": "a", "match": {"route": "/v1/a"}, "key": "header:x-tenant", "rate": 3, "period": "1m", "burst": 0, "shadow": false}]}`
	for name, src := range map[string]string{"yaml": yamlSrc, "json": jsonSrc} {
		got, err := ParseFile([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v\nwant %+v", name, got, want)
		}
	}
	got, err := ParseFile([]byte("rules: []\n"))
	if err != nil || len(got) != 0 {
		t.Fatalf("empty list: %v, %v", got, err)
	}
}

func TestExampleRulesFile(t *testing.T) {
	data, err := os.ReadFile("../../examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ParseFile(data)
	if err != nil {
		t.Fatalf("examples/rules.yaml: %v", err)
	}
	m, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(rs []*Rule) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(m.Match("/v1/search", "GET", "free", nil)); !reflect.DeepEqual(got,
		[]string{"reads.free", "search.hour", "search.minute", "search.second", "tenant.api"}) {
		t.Errorf("search, free: %q", got)
	}
	if got := ids(m.Match("/v1/search", "GET", "pro", nil)); !reflect.DeepEqual(got,
		[]string{"reads.pro", "search.hour", "search.minute", "search.second", "tenant.api"}) {
		t.Errorf("search, pro: %q", got)
	}
	if got := ids(m.Match("/v1/login", "POST", "", nil)); !reflect.DeepEqual(got, []string{"login.ip", "tenant.api"}) {
		t.Errorf("login: %q", got)
	}
	var shadow, lease, global, header bool
	for _, r := range rs {
		shadow = shadow || r.Shadow
		lease = lease || r.Lease > 0
		global = global || r.Key == KeyGlobal
		header = header || r.Key == "header:X-Tenant"
	}
	if !shadow || !lease || !global || !header {
		t.Errorf("example lacks a shadow (%v), lease (%v), global (%v) or header (%v) rule", shadow, lease, global, header)
	}
}

func TestMarshalFileRoundTrip(t *testing.T) {
	data, err := os.ReadFile("../../examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	// Un-normalized input too: MarshalFile writes what it is given.
	raw := []Rule{{ID: "z", Match: Match{Route: "/z/{id}/*", Plan: "gold"}, Key: KeyUser, Rate: 1,
		Period: Duration(36 * time.Hour), Shadow: true, Timeout: Duration(1500 * time.Microsecond)}}
	for _, in := range [][]Rule{rs, raw, {}} {
		out, err := MarshalFile(in)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseFile(out)
		if err != nil {
			t.Fatalf("ParseFile(MarshalFile) = %v\n%s", err, out)
		}
		want := make([]Rule, len(in))
		for i, r := range in {
			want[i] = Normalize(r)
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\nfile:\n%s", back, want, out)
		}
	}
	if _, err := MarshalFile([]Rule{{ID: "bad"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MarshalFile(invalid) = %v, want ErrInvalid", err)
	}
}

func FuzzParseFile(f *testing.F) {
	if data, err := os.ReadFile("../../examples/rules.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("rules:\n  - {id: a, match: {route: \"/v1/{id}/*\"}, key: ip, rate: 1, period: 1s}\n"))
	f.Add([]byte(`{"rules":[{"id":"a","match":{"route":"/"},"key":"global","rate":1,"period":"1h","lease":1}]}`))
	f.Add([]byte("rules:\n  - &a {id: a}\n  - *a\n"))
	f.Add([]byte("rules: [{id: a, <<: {x: 1}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseFile(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T) is not a non-empty *ValidationError", err, err)
			}
			if rs != nil {
				t.Fatal("rules returned with an error")
			}
			return
		}
		if err := Validate(rs); err != nil {
			t.Fatalf("ParseFile accepted rules that Validate rejects: %v", err)
		}
		for _, r := range rs {
			if !Normalize(r).Equal(r) {
				t.Fatalf("rule not normalized: %+v", r)
			}
			if err := r.Limit().Validate(MaxLogLimit); err != nil && !r.Unlimited { // an unlimited rule has no limit
				t.Fatalf("accepted rule %+v has an invalid limit: %v", r, err)
			}
		}
		m, err := Compile(rs)
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		for _, r := range rs {
			if got, ok := m.Rule(r.ID); !ok || !got.Equal(r) {
				t.Fatalf("Matcher.Rule(%q) = %v, %v", r.ID, got, ok)
			}
		}
		out, err := MarshalFile(rs)
		if err != nil {
			t.Fatalf("MarshalFile: %v", err)
		}
		back, err := ParseFile(out)
		if err != nil || !reflect.DeepEqual(back, rs) && len(rs) > 0 {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, back, rs)
		}
	})
}

// A leading "---" (and a closing "...") is one document, as before.
func TestParseFileOneDocumentWithMarkers(t *testing.T) {
	rs, err := ParseFile([]byte("---\nrules:\n  - {id: a, match: {route: /a}, key: ip, rate: 1, period: 1s}\n...\n"))
	if err != nil || len(rs) != 1 {
		t.Fatalf("rules = %+v, err = %v", rs, err)
	}
	_, err = ParseFile([]byte("rules: []\n---\nrules: []\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: a second YAML document") {
		t.Fatalf("err = %v, want the line of the second document", err)
	}
}

func TestParseMaxKeys(t *testing.T) {
	rs, err := ParseFile([]byte("rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 5, period: 1s, max_keys: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].MaxKeys != 1000 {
		t.Fatalf("MaxKeys = %d, want 1000", rs[0].MaxKeys)
	}
	ps := parseProblems(t, "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 5, period: 1s, max_keys: -1}\n")
	if len(ps) != 1 || ps[0].Field != "rules[0].max_keys" {
		t.Fatalf("problems %+v, want one on rules[0].max_keys", ps)
	}
}

func TestParseEventsOption(t *testing.T) {
	rs, err := ParseFile([]byte("rules:\n  - id: a\n    match: {route: /x}\n    key: ip\n    rate: 1\n    period: 1s\n    events: {sample: 0.5, redact: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Events != (Events{Sample: 0.5, Redact: true}) || rs[0].Events.SampleRate() != 0.5 {
		t.Fatalf("events = %+v", rs[0].Events)
	}
	if (Events{}).SampleRate() != DefaultEventSample {
		t.Fatal("default sample rate")
	}
	for _, bad := range []string{"{sample: 2}", "{sample: yes}", "{colour: red}", "[1]"} {
		_, err := ParseFile([]byte("rules:\n  - id: a\n    match: {route: /x}\n    key: ip\n    rate: 1\n    period: 1s\n    events: " + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), "events") {
			t.Fatalf("events: %s: err = %v, want an events problem", bad, err)
		}
	}
}

// TestGCRAIsLeakyBucket: "gcra" is accepted as an alias and normalized to
// leaky_bucket, so what is written (and reaches the Raft log) names the
// algorithm itself; an unknown name is still refused, naming the alias.
func TestGCRAIsLeakyBucket(t *testing.T) {
	got, err := ParseFile([]byte("rules:\n  - id: a\n    match: {route: /v1/a}\n    key: ip\n    algorithm: gcra\n    rate: 3\n    period: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Algorithm != AlgLeakyBucket {
		t.Fatalf("algorithm %q after parsing; want %q", got[0].Algorithm, AlgLeakyBucket)
	}
	r := Rule{ID: "b", Match: Match{Route: "/v1/b"}, Key: "ip", Algorithm: AlgGCRA, Rate: 3, Period: Duration(time.Second)}
	if err := Validate([]Rule{r}); err != nil {
		t.Fatalf("Validate(gcra): %v", err)
	}
	if n := Normalize(r); n.Algorithm != AlgLeakyBucket {
		t.Fatalf("Normalize: algorithm %q; want %q", n.Algorithm, AlgLeakyBucket)
	}
	if a, b := r.Limit(), Normalize(r).Limit(); a != b || a.Algorithm.String() != AlgLeakyBucket {
		t.Fatalf("Limit: %+v vs normalized %+v", a, b)
	}
	r.Algorithm = "gcra2"
	if err := Validate([]Rule{r}); err == nil || !strings.Contains(err.Error(), "leaky_bucket (alias gcra)") {
		t.Fatalf("Validate(gcra2): %v", err)
	}
}
