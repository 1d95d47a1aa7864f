package envoyrl

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

func TestImportEveryField(t *testing.T) {
	data, err := os.ReadFile("testdata/every-field.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, notes, err := Import([]File{{Name: "every-field.yaml", Data: data}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []rules.Entry {
		var out []rules.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	d := func(id string, rate int64, period time.Duration, path []rules.Entry) rules.Rule {
		return rules.Rule{ID: id, Match: rules.Match{Domain: "edge", Descriptor: path}, Key: rules.KeyDescriptor,
			Algorithm: rules.AlgSlidingWindow, Rate: rate, Period: rules.Duration(period)}
	}
	gold := d("edge.tenant.plan_gold", 50000, 24*time.Hour, e("tenant", "", "plan", "gold"))
	gold.Shadow, gold.Replaces = true, []string{"per_ip"}
	want := []rules.Rule{
		d("per_ip", 10, time.Second, e("remote_address", "")),
		d("edge.remote_address_50.0.0.5", 20, 5*time.Minute, e("remote_address", "50.0.0.5")),
		d("edge.path__v1_any", 1000, time.Hour, e("path", "/v1/*")),
		gold,
		{ID: "edge.tenant.plan_internal", Match: rules.Match{Domain: "edge", Descriptor: e("tenant", "", "plan", "internal")}, Key: rules.KeyDescriptor, Unlimited: true},
		{ID: "edge.tenant.plan_free", Match: rules.Match{Domain: "edge", Descriptor: e("tenant", "", "plan", "free")}, Key: rules.KeyDescriptor, Unlimited: true},
		{ID: "edge.ldap", Match: rules.Match{Domain: "edge", Descriptor: e("ldap", "")}, Key: rules.KeyDescriptor, Unlimited: true},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d rules, want %d: %+v", len(rs), len(want), rs)
	}
	for i := range want {
		if !rs[i].Equal(want[i]) {
			t.Errorf("rule %d:\n got %+v\nwant %+v", i, rs[i], want[i])
		}
	}
	if len(notes) != 1 || notes[0].Line != 17 || !strings.Contains(notes[0].Msg, "detailed_metric") {
		t.Errorf("notes %v", notes)
	}
	// The rules are a valid rules file, and fixed_window is on request.
	if _, err := rules.MarshalFile(rs); err != nil {
		t.Fatal(err)
	}
	rs, _, err = Import([]File{{Name: "f", Data: data}}, Options{Algorithm: rules.AlgFixedWindow})
	if err != nil || rs[0].Algorithm != rules.AlgFixedWindow {
		t.Fatalf("fixed_window: %v %+v", err, rs)
	}
}

func TestImportBroken(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // "line: text" fragments, in order
	}{
		{"not yaml", "domain: [", []string{"not YAML"}},
		{"empty", "", []string{"file is empty"}},
		{"no domain", "descriptors: []\n", []string{"missing domain"}},
		{"unknown top field", "domain: a\nfoo: 1\n", []string{":2: unknown top-level field \"foo\""}},
		{"everything wrong", `domain: a
descriptors:
  - value: x
  - key: k
    rate_limit:
      unit: month
      requests_per_unit: 1
  - key: k2
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: k3
    rate_limit:
      unit: second
  - key: k4
    rate_limit:
      requests_per_unit: 3
      unit: second
      replaces: [{name: nobody}]
  - key: k5
    colour: red
  - key: k6
    value: a*b
  - key: k7
    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}
`, []string{
			":3: a descriptor needs a key",
			":6: unit \"month\"",
			":11: requests_per_unit 0 blocks",
			":14: rate_limit needs requests_per_unit",
			":21: unknown descriptor field \"colour\"",
			":23: value \"a*b\"",
			":25: unit_multiplier must be",
			":15: replaces \"nobody\"",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, _, err := Import([]File{{Name: "bad.yaml", Data: []byte(tc.src)}}, Options{})
			var ie *Error
			if !errors.As(err, &ie) || !errors.Is(err, ErrImport) || rs != nil {
				t.Fatalf("want an *Error and no rules, got %v, %v", rs, err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("missing %q in:\n%s", w, msg)
				}
			}
			if len(ie.Problems) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ie.Problems), len(tc.want), msg)
			}
		})
	}
	// The same domain twice across files.
	f := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors: [{key: k}]\n")}
	g := File{Name: "b.yaml", Data: []byte("domain: d\n")}
	if _, _, err := Import([]File{f, g}, Options{}); err == nil || !strings.Contains(err.Error(), "b.yaml:1: domain \"d\" is also in a.yaml") {
		t.Fatalf("duplicate domain: %v", err)
	}
}
