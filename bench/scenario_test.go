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
			if r.ID != want.ID || r.Rate != want.Rate || r.Burst != want.Burst || time.Duration(r.Period) != want.Period || r.Lease != want.RuleLease() {
				t.Fatalf("%s: parsed %+v, want %+v", name, r, want)
			}
		}
	}
	if _, err := Preset("nope"); !errors.Is(err, ErrInput) {
		t.Fatalf("unknown preset: %v", err)
	}
}

// The rules' timeout is rendered when set; a lease over the burst or a bad
// timeout is refused.
func TestScenarioTimeoutAndLease(t *testing.T) {
	sc, err := Preset("lease")
	if err != nil {
		t.Fatal(err)
	}
	sc.Timeout = 250 * time.Millisecond
	rs, err := rules.ParseFile([]byte(sc.RulesYAML()))
	if err != nil || len(rs) != 1 || rs[0].Timeout.D() != 250*time.Millisecond || rs[0].Lease != 20 {
		t.Fatalf("parsed %+v, %v", rs, err)
	}
	for _, bad := range []func(*Scenario){
		func(s *Scenario) { s.Rules[0].Lease = s.Rules[0].Burst + 1 },
		func(s *Scenario) { s.Rules[0].Lease = -1 },
		func(s *Scenario) { s.Timeout = 11 * time.Second },
		func(s *Scenario) { s.Timeout = 1500 * time.Microsecond },
	} {
		s, _ := Preset("lease")
		s.Rules = append([]RuleSpec(nil), s.Rules...)
		bad(&s)
		if err := s.Validate(); !errors.Is(err, ErrInput) {
			t.Errorf("%+v: Validate = %v, want ErrInput", s, err)
		}
	}
}
