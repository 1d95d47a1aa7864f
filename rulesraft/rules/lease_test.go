package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const leaseRuleYAML = `rules:
  - id: a
    match: {route: /a}
    key: apikey
    rate: 100
    period: 1s
`

// lease: auto, off, a count, 0 (off, its meaning before auto) and absent
// (auto) are read; anything else is refused with the field and line.
func TestParseLease(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Lease
	}{
		{"", LeaseAuto},
		{"    lease: auto\n", LeaseAuto},
		{"    lease: off\n", LeaseOff},
		{"    lease: 0\n", LeaseOff},
		{"    lease: 3\n", 3},
		{"    lease: \"7\"\n", 7},
	} {
		rs, err := ParseFile([]byte(leaseRuleYAML + tc.line))
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if rs[0].Lease != tc.want {
			t.Errorf("%q: lease %v, want %v", tc.line, rs[0].Lease, tc.want)
		}
	}
	for _, bad := range []string{"sometimes", "-1", "1.5", "[1]", "{n: 1}", `""`, "true", "Auto"} {
		_, err := ParseFile([]byte(leaseRuleYAML + "    lease: " + bad + "\n"))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 {
			t.Fatalf("lease: %s: %v, want one problem", bad, err)
		}
		p := ve.Problems[0]
		if p.Field != "rules[0].lease" || p.Line != 7 || !strings.Contains(p.Msg, "want auto, off or a count ≥ 1") {
			t.Errorf("lease: %s: %+v", bad, p)
		}
	}
}

// JSON (the HTTP API, the Raft log) and the rules file written back keep
// every lease setting; a bad value is a clear error.
func TestLeaseRoundTrips(t *testing.T) {
	for _, l := range []Lease{LeaseAuto, LeaseOff, 1, 50} {
		r := Rule{ID: "a", Match: Match{Route: "/a"}, Key: KeyAPIKey, Rate: 100, Period: Duration(1e9), Lease: l}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Rule
		if err := json.Unmarshal(b, &back); err != nil || back.Lease != l {
			t.Fatalf("%v: JSON %s read back as %v (%v)", l, b, back.Lease, err)
		}
		f, err := MarshalFile([]Rule{r})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ParseFile(f)
		if err != nil || rs[0].Lease != l {
			t.Fatalf("%v: file\n%s read back as %v (%v)", l, f, rs, err)
		}
	}
	for in, want := range map[string]Lease{`"auto"`: LeaseAuto, `"off"`: LeaseOff, `0`: LeaseOff, `12`: 12, `"12"`: 12} {
		var r Rule
		if err := json.Unmarshal([]byte(`{"id":"a","lease":`+in+`}`), &r); err != nil || r.Lease != want {
			t.Errorf("JSON lease %s: %v (%v), want %v", in, r.Lease, err, want)
		}
	}
	for _, in := range []string{`"never"`, `-3`, `""`, `1.5`, `true`} {
		var r Rule
		err := json.Unmarshal([]byte(`{"id":"a","lease":`+in+`}`), &r)
		if err == nil || !strings.Contains(err.Error(), "want auto, off or a count ≥ 1") {
			t.Errorf("JSON lease %s: %v, want a clear error", in, err)
		}
	}
}

// The lease setting is part of a rule's identity: Equal and the diff
// that weir rules prints see a change between auto, off and a count.
func TestLeaseInEqualAndDiff(t *testing.T) {
	a := Rule{ID: "a", Match: Match{Route: "/a"}, Key: KeyAPIKey, Rate: 100, Period: Duration(1e9)}
	b := a
	b.Lease = LeaseOff
	if a.Equal(b) {
		t.Fatal("auto and off rules are Equal")
	}
	d := strings.Join(DiffSets([]Rule{a}, []Rule{b}), "\n")
	if !strings.Contains(d, "lease") || !strings.Contains(d, "auto") || !strings.Contains(d, "off") {
		t.Fatalf("diff auto → off: %q", d)
	}
	b.Lease = 5
	if d := strings.Join(DiffSets([]Rule{a}, []Rule{b}), "\n"); !strings.Contains(d, "auto") || !strings.Contains(d, "5") {
		t.Fatalf("diff auto → 5: %q", d)
	}
}
