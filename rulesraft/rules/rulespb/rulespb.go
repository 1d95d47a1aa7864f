package rulespb

import (
	"fmt"
	"time"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// RuleToProto converts a rule to its wire form. Zero durations are sent as
// empty strings so that "absent" stays absent.
func RuleToProto(r rules.Rule) *weirv1.Rule {
	return &weirv1.Rule{
		Id:              r.ID,
		Match:           matchToProto(r.Match),
		Key:             r.Key,
		Algorithm:       r.Algorithm,
		Rate:            r.Rate,
		Period:          durationString(r.Period),
		Burst:           r.Burst,
		FailMode:        r.FailMode,
		Timeout:         durationString(r.Timeout),
		Shadow:          r.Shadow,
		Lease:           r.Lease.Fixed(),
		LeaseMode:       leaseMode(r.Lease),
		MaxKeys:         r.MaxKeys,
		Cost:            r.Cost,
		CostHeader:      r.CostHeader,
		Scope:           r.Scope,
		Events:          eventsToProto(r.Events),
		Replaces:        r.Replaces,
		Unlimited:       r.Unlimited,
		Limit:           r.Concurrency,
		PermitTtl:       durationString(r.PermitTTL),
		PriorityHeader:  r.PriorityHeader,
		PriorityDefault: r.PriorityDefault,
		Reserve:         reserveToProto(r.Reserve),
		Durable:         r.Durable,
		Calendar:        r.Calendar,
		Timezone:        r.Timezone,
	}
}

func reserveToProto(rs rules.Reserves) map[string]int64 {
	if len(rs) == 0 {
		return nil
	}
	out := make(map[string]int64, len(rs))
	for c, s := range rs {
		out[c] = int64(s)
	}
	return out
}

// leaseMode is the wire's lease_mode: "off" for off, "" otherwise (auto,
// or a fixed count carried in lease).
func leaseMode(l rules.Lease) string {
	if l == rules.LeaseOff {
		return "off"
	}
	return ""
}

// leaseFromProto reads lease (a count) and lease_mode; a mode other than
// "", "auto" or "off" is kept as an invalid lease for Validate to refuse.
func leaseFromProto(p *weirv1.Rule) rules.Lease {
	if n := p.GetLease(); n != 0 {
		return rules.Lease(n)
	}
	switch p.GetLeaseMode() {
	case "", "auto":
		return rules.LeaseAuto
	case "off":
		return rules.LeaseOff
	}
	return rules.LeaseOff - 1
}

// eventsToProto sends the zero (default) option as absent.
func eventsToProto(e rules.Events) *weirv1.EventsOption {
	if e == (rules.Events{}) {
		return nil
	}
	return &weirv1.EventsOption{Sample: e.Sample, Redact: e.Redact}
}

func matchToProto(m rules.Match) *weirv1.Match {
	p := &weirv1.Match{Route: m.Route, Method: m.Method, Plan: m.Plan, Domain: m.Domain}
	for _, e := range m.Descriptor {
		p.Descriptor_ = append(p.Descriptor_, &weirv1.DescriptorEntry{Key: e.Key, Value: e.Value})
	}
	return p
}

func durationString(d rules.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// RuleFromProto converts a wire rule. It fails only on what cannot be
// represented (a nil rule, an unparsable duration); the problems carry
// field names as rules.Validate does.
func RuleFromProto(p *weirv1.Rule) (rules.Rule, error) {
	var ps []rules.Problem
	r := ruleFromProto(p, "", &ps)
	if len(ps) > 0 {
		return rules.Rule{}, &rules.ValidationError{Problems: ps}
	}
	return r, nil
}

// RulesFromProto converts a list of wire rules, naming problems by index
// ("rules[2].period") and listing all of them.
func RulesFromProto(ps []*weirv1.Rule) ([]rules.Rule, error) {
	var probs []rules.Problem
	out := make([]rules.Rule, len(ps))
	for i, p := range ps {
		out[i] = ruleFromProto(p, fmt.Sprintf("rules[%d].", i), &probs)
	}
	if len(probs) > 0 {
		return nil, &rules.ValidationError{Problems: probs}
	}
	return out, nil
}

func ruleFromProto(p *weirv1.Rule, prefix string, ps *[]rules.Problem) rules.Rule {
	if p == nil {
		field := prefix
		if field == "" {
			field = "rule"
		}
		*ps = append(*ps, rules.Problem{Field: trimDot(field), Msg: "missing"})
		return rules.Rule{}
	}
	r := rules.Rule{
		ID:              p.GetId(),
		Key:             p.GetKey(),
		Algorithm:       p.GetAlgorithm(),
		Rate:            p.GetRate(),
		Burst:           p.GetBurst(),
		FailMode:        p.GetFailMode(),
		Shadow:          p.GetShadow(),
		Lease:           leaseFromProto(p),
		MaxKeys:         p.GetMaxKeys(),
		Cost:            p.GetCost(),
		CostHeader:      p.GetCostHeader(),
		Scope:           p.GetScope(),
		Events:          rules.Events{Sample: p.GetEvents().GetSample(), Redact: p.GetEvents().GetRedact()},
		Replaces:        p.GetReplaces(),
		Unlimited:       p.GetUnlimited(),
		Concurrency:     p.GetLimit(),
		PriorityHeader:  p.GetPriorityHeader(),
		PriorityDefault: p.GetPriorityDefault(),
		Durable:         p.GetDurable(),
		Calendar:        p.GetCalendar(),
		Timezone:        p.GetTimezone(),
	}
	if rs := p.GetReserve(); len(rs) > 0 {
		r.Reserve = rules.Reserves{}
		for c, s := range rs {
			r.Reserve[c] = rules.Share(s)
		}
	}
	if m := p.GetMatch(); m != nil {
		r.Match = rules.Match{Route: m.GetRoute(), Method: m.GetMethod(), Plan: m.GetPlan(), Domain: m.GetDomain()}
		for _, e := range m.GetDescriptor_() {
			r.Match.Descriptor = append(r.Match.Descriptor, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
	}
	r.Period = parseDuration(p.GetPeriod(), prefix+"period", ps)
	r.Timeout = parseDuration(p.GetTimeout(), prefix+"timeout", ps)
	r.PermitTTL = parseDuration(p.GetPermitTtl(), prefix+"permit_ttl", ps)
	return r
}

func trimDot(s string) string {
	if n := len(s); n > 0 && s[n-1] == '.' {
		return s[:n-1]
	}
	return s
}

func parseDuration(s, field string, ps *[]rules.Problem) rules.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		*ps = append(*ps, rules.Problem{Field: field,
			Msg: fmt.Sprintf("invalid duration %q (use a Go duration such as 1s, 30s, 5m, 1h, 24h)", s)})
		return 0
	}
	return rules.Duration(d)
}

// OverrideToProto converts an override to its wire form.
func OverrideToProto(o rules.Override) *weirv1.Override {
	var ms int64
	if !o.ExpiresAt.IsZero() {
		ms = o.ExpiresAt.UnixMilli()
	}
	return &weirv1.Override{Key: o.Key, Rule: o.Rule, Rate: o.Rate, Burst: o.Burst, Block: o.Block, ExpiresAtMs: ms}
}

// OverrideFromProto converts a wire override; expires_at_ms 0 is "never"
// (a zero ExpiresAt), other values become UTC times.
func OverrideFromProto(p *weirv1.Override) (rules.Override, error) {
	if p == nil {
		return rules.Override{}, &rules.ValidationError{Problems: []rules.Problem{{Field: "override", Msg: "missing"}}}
	}
	o := rules.Override{Key: p.GetKey(), Rule: p.GetRule(), Rate: p.GetRate(), Burst: p.GetBurst(), Block: p.GetBlock()}
	if ms := p.GetExpiresAtMs(); ms != 0 {
		o.ExpiresAt = time.UnixMilli(ms).UTC()
	}
	return o, nil
}

// SetToProto converts a rule set; a nil set gives an empty version-0 set.
func SetToProto(s *rules.Set) *weirv1.RuleSet {
	if s == nil {
		return &weirv1.RuleSet{}
	}
	out := &weirv1.RuleSet{
		Version:   s.Version,
		Rules:     make([]*weirv1.Rule, len(s.Rules)),
		Overrides: make([]*weirv1.Override, len(s.Overrides)),
	}
	for i, r := range s.Rules {
		out.Rules[i] = RuleToProto(r)
	}
	for i, o := range s.Overrides {
		out.Overrides[i] = OverrideToProto(o)
	}
	return out
}

// SetFromProto converts a wire rule set into a sorted rules.Set (see
// rules.NewSet), listing every conversion problem.
func SetFromProto(p *weirv1.RuleSet) (*rules.Set, error) {
	if p == nil {
		return nil, &rules.ValidationError{Problems: []rules.Problem{{Field: "rule_set", Msg: "missing"}}}
	}
	rs, err := RulesFromProto(p.GetRules())
	if err != nil {
		return nil, err
	}
	os := make([]rules.Override, len(p.GetOverrides()))
	for i, po := range p.GetOverrides() {
		o, err := OverrideFromProto(po)
		if err != nil {
			return nil, fmt.Errorf("overrides[%d]: %w", i, err)
		}
		os[i] = o
	}
	return rules.NewSet(p.GetVersion(), rs, os), nil
}
