package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// RuleSpec is one token-bucket rule a scenario installs on the target.
type RuleSpec struct {
	ID     string
	Rate   int64
	Period time.Duration
	Burst  int64
	// Lease is the tokens a gateway may hold locally (0: exact mode,
	// unless AutoLease).
	Lease int64
	// AutoLease (with Lease 0) writes lease: auto, the rules' default: the
	// owners lease hot keys on their own.
	AutoLease bool
	// Scope is the rule's scope ("": region; "global": shared by regions).
	Scope string
}

// RuleLease is the rule's lease setting as the rules file says it.
func (r RuleSpec) RuleLease() rules.Lease {
	switch {
	case r.Lease > 0:
		return rules.Lease(r.Lease)
	case r.AutoLease:
		return rules.LeaseAuto
	}
	return rules.LeaseOff
}

// Event is something a scenario does to a spawned cluster half-way.
type Event string

// Events.
const (
	EventNone Event = ""
	EventKill Event = "kill" // kill the node owning the hottest key (failover)
	EventAdd  Event = "add"  // start one more node (resize)
)

// Scenario is a named preset: what rules exist, which keys are drawn and
// how, and what each check asks for.
type Scenario struct {
	Name string
	// Rules all apply to every check's key, as one all-or-nothing group
	// when there are several.
	Rules []RuleSpec
	Keys  int
	Zipf  bool
	Cost  int64
	// Accuracy: report admitted versus ideal per key and per-gateway
	// fairness (needs few keys and a single rule).
	Accuracy bool
	Event    Event
	// Timeout is the rules' timeout: how long an SDK gateway waits for
	// the owner before the rule's fail mode decides (0: the rules'
	// default, 5ms).
	Timeout time.Duration
	// Regions, when set, runs the scenario on one spawned cluster per
	// region, peered, with callers in the first region, half of them in
	// the second, none in the others (unequal demand on one global quota).
	Regions []string
}

// Presets lists the scenario names Preset knows.
func Presets() []string {
	return []string{"steady", "hot", "multiwindow", "accuracy", "lease", "autolease", "failover", "resize", "regions"}
}

// Preset returns the named scenario.
func Preset(name string) (Scenario, error) {
	// The throughput presets use the rules' default lease (auto); the
	// accuracy ones are exact (their bounds are stated for exact mode).
	perSec := RuleSpec{ID: "bench.persec", Rate: 10, Period: time.Second, Burst: 10, AutoLease: true}
	acc := RuleSpec{ID: "bench.acc", Rate: 1000, Period: time.Second, Burst: 100}
	switch name {
	case "steady":
		return Scenario{Name: name, Rules: []RuleSpec{perSec}, Keys: 100_000, Cost: 1}, nil
	case "hot":
		// Zipf keys under a rule whose hottest keys, at this load, take
		// more than the automatic leases' threshold (100 tokens/s) with
		// tokens to spare: the owners lease them on their own.
		hot := RuleSpec{ID: "bench.hot", Rate: 1000, Period: time.Second, Burst: 100, AutoLease: true}
		return Scenario{Name: name, Rules: []RuleSpec{hot}, Keys: 100_000, Zipf: true, Cost: 1}, nil
	case "multiwindow":
		return Scenario{Name: name, Rules: []RuleSpec{
			{ID: "bench.mw.sec", Rate: 10, Period: time.Second, Burst: 10, AutoLease: true},
			{ID: "bench.mw.min", Rate: 300, Period: time.Minute, Burst: 300, AutoLease: true},
			{ID: "bench.mw.hour", Rate: 5000, Period: time.Hour, Burst: 5000, AutoLease: true},
		}, Keys: 10_000, Cost: 1}, nil
	case "accuracy":
		return Scenario{Name: name, Rules: []RuleSpec{acc}, Keys: 4, Cost: 1, Accuracy: true}, nil
	case "lease":
		lease := RuleSpec{ID: "bench.lease", Rate: 1000, Period: time.Second, Burst: 100, Lease: 20}
		return Scenario{Name: name, Rules: []RuleSpec{lease}, Keys: 2, Cost: 1, Accuracy: true}, nil
	case "autolease":
		auto := RuleSpec{ID: "bench.autolease", Rate: 1000, Period: time.Second, Burst: 100, AutoLease: true}
		return Scenario{Name: name, Rules: []RuleSpec{auto}, Keys: 2, Cost: 1, Accuracy: true}, nil
	case "failover":
		return Scenario{Name: name, Rules: []RuleSpec{acc}, Keys: 4, Cost: 1, Accuracy: true, Event: EventKill}, nil
	case "resize":
		return Scenario{Name: name, Rules: []RuleSpec{acc}, Keys: 4, Cost: 1, Accuracy: true, Event: EventAdd}, nil
	case "regions":
		global := acc
		global.ID, global.Scope = "bench.global", "global"
		return Scenario{Name: name, Rules: []RuleSpec{global}, Keys: 4, Cost: 1, Accuracy: true, Regions: []string{"ap", "eu", "us"}}, nil
	}
	return Scenario{}, fmt.Errorf("%w: unknown scenario %q (one of %s)", ErrInput, name, strings.Join(Presets(), ", "))
}

// Validate reports whether s can be run.
func (s Scenario) Validate() error {
	switch {
	case len(s.Rules) == 0:
		return fmt.Errorf("%w: scenario %q has no rules", ErrInput, s.Name)
	case s.Keys < 1:
		return fmt.Errorf("%w: scenario %q has %d keys", ErrInput, s.Name, s.Keys)
	case s.Cost < 0:
		return fmt.Errorf("%w: negative cost %d", ErrInput, s.Cost)
	case s.Accuracy && (len(s.Rules) != 1 || s.Keys > 1000):
		return fmt.Errorf("%w: accuracy needs one rule and at most 1000 keys", ErrInput)
	case s.Timeout < 0 || s.Timeout > rules.MaxTimeout || s.Timeout%time.Millisecond != 0:
		return fmt.Errorf("%w: rule timeout %v must be whole milliseconds in [0, %v]", ErrInput, s.Timeout, rules.MaxTimeout)
	}
	for _, r := range s.Rules {
		if r.Rate < 1 || r.Burst < 1 || r.Period <= 0 || r.Period%time.Millisecond != 0 {
			return fmt.Errorf("%w: rule %q: rate, burst and period (whole ms) must be positive", ErrInput, r.ID)
		}
		if r.Lease < 0 || r.Lease > r.Burst {
			return fmt.Errorf("%w: rule %q: lease %d must be in [0, burst %d]", ErrInput, r.ID, r.Lease, r.Burst)
		}
	}
	return nil
}

// RuleIDs returns the ids of s's rules, in order.
func (s Scenario) RuleIDs() []string {
	ids := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		ids[i] = r.ID
	}
	return ids
}

// RulesYAML renders s's rules as a Weir rules file: token buckets that
// fail closed (a check the cluster did not decide is never admitted), with
// s's timeout when set.
func (s Scenario) RulesYAML() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, r := range s.Rules {
		fmt.Fprintf(&b, "  - id: %s\n    match: {route: /bench/%s, method: GET, plan: \"*\"}\n    key: apikey\n    algorithm: token_bucket\n    rate: %d\n    period: %s\n    burst: %d\n    fail_mode: closed\n    lease: %s\n",
			r.ID, r.ID, r.Rate, r.Period, r.Burst, r.RuleLease())
		if s.Timeout > 0 {
			fmt.Fprintf(&b, "    timeout: %s\n", s.Timeout)
		}
		if r.Scope != "" {
			fmt.Fprintf(&b, "    scope: %s\n", r.Scope)
		}
	}
	return b.String()
}
