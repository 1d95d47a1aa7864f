package envoyrl

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// FuzzImport reads outside bytes as an envoyproxy/ratelimit config file
// (weir rules import --from envoy-ratelimit). Whatever the bytes: no
// panic; a refusal is an *Error listing at least one problem, with no
// rules and no notes, and an answer bounded by the file; what is imported
// validates, compiles to a descriptor matcher, reads back the same from
// the rules file MarshalFile writes, and is imported the same a second
// time.
func FuzzImport(f *testing.F) {
	if data, err := os.ReadFile("testdata/every-field.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"domain: d\ndescriptors: [{key: k}]\n",
		"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 3}\n",
		"domain: a\ndescriptors:\n  - key: k\n    value: v\n    descriptors:\n      - key: j\n        rate_limit: {name: n, unit: minute, requests_per_unit: 5, replaces: [{name: n}]}\n",
		"domain: [",
		"domain: a\ndescriptors:\n  - key: k6\n    value: a*b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, notes, err := Import([]File{{Name: "f.yaml", Data: data}}, Options{})
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) || !errors.Is(err, ErrImport) || len(ie.Problems) == 0 || rs != nil || notes != nil {
				t.Fatalf("refusal %v (%T): want an *Error with problems and no rules (got %d rules, %d notes)", err, err, len(rs), len(notes))
			}
			if max := 4<<10 + 100*len(data); len(err.Error()) > max {
				t.Fatalf("a %d-byte file made a %d-byte error (over %d)", len(data), len(err.Error()), max)
			}
			return
		}
		if err := rules.Validate(rs); err != nil {
			t.Fatalf("imported rules do not validate: %v", err)
		}
		for _, r := range rs {
			if r.Match.Domain == "" {
				t.Fatalf("rule %q has no domain", r.ID)
			}
		}
		if _, err := rules.CompileDescriptors(rs); err != nil {
			t.Fatalf("CompileDescriptors: %v", err)
		}
		again, notes2, err := Import([]File{{Name: "f.yaml", Data: data}}, Options{})
		if err != nil || !reflect.DeepEqual(again, rs) || !reflect.DeepEqual(notes2, notes) {
			t.Fatalf("a second import differs: %v", err)
		}
		file, err := rules.MarshalFile(rs)
		if err != nil {
			t.Fatalf("MarshalFile: %v", err)
		}
		back, err := rules.ParseFile(file)
		if err != nil || len(back) != len(rs) {
			t.Fatalf("ParseFile(MarshalFile): %v\n%s", err, file)
		}
		for i := range rs {
			if !back[i].Equal(rules.Normalize(rs[i])) {
				t.Fatalf("rule %d round trip: %+v, want %+v", i, back[i], rs[i])
			}
		}
	})
}
