package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Every preset is valid and its rules file parses as Weir rules with the
// same ids, rates and bursts.
func TestPresets(t *testing.T) {
	for _, name := range Presets() {
		sc, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rs, err := rules.ParseFile([]byte(sc.RulesYAML()))
		if err != nil {
			t.Fatalf("%s: rules file: %v\n%s", name, err, sc.RulesYAML())
		}
		if len(rs) != len(sc.Rules) {
			t.Fatalf("%s: %d rules parsed, want %d", name, len(rs), len(sc.Rules))
		}
		for i, r := range rs {
			want := sc.Rules[i]
			if r.ID != want.ID || r.Rate != want.Rate || r.Burst != want.Burst || time.Duration(r.Period) != want.Period {
				t.Fatalf("%s: parsed %+v, want %+v", name, r, want)
			}
		}
	}
	if _, err := Preset("nope"); !errors.Is(err, ErrInput) {
		t.Fatalf("unknown preset: %v", err)
	}
}
