package router

import (
	"fmt"
	"strings"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// RuleView is the rule set compiled for the check path (one
// internal/rulecache value, rebuilt when the Raft FSM publishes a new
// version). It is immutable.
type RuleView struct {
	Version   uint64
	Rules     map[string]*CompiledRule // by rule id
	overrides map[ovKey]rules.Override
}

type ovKey struct{ rule, key string }

// CompiledRule is one rule as the check path uses it.
type CompiledRule struct {
	Rule   rules.Rule // normalized (rules.Normalize)
	auto   bool       // lease: auto, and a rule the owner may lease (autoLeasable)
	limit  bucket.Limit
	window time.Duration // rule.Period, in whole milliseconds as the wire reports it
	cap    *shard.KeyCap // the rule's key cap, shared by its shard items

	volatile bool // durable: off: its counters are never written to a data dir
}

// compileRules builds the view of set (nil: none yet, version 0).
func compileRules(set *rules.Set) *RuleView {
	v := &RuleView{Rules: map[string]*CompiledRule{}, overrides: map[ovKey]rules.Override{}}
	if set == nil {
		return v
	}
	v.Version = set.Version
	for _, r := range set.Rules {
		r = rules.Normalize(r)
		v.Rules[r.ID] = &CompiledRule{Rule: r, limit: r.Limit(), window: r.Window().Truncate(time.Millisecond),
			cap: &shard.KeyCap{Rule: r.ID, MaxKeys: r.MaxKeys}, auto: autoLeasable(&r), volatile: !r.IsDurable()}
	}
	for _, o := range set.Overrides {
		v.overrides[ovKey{o.Rule, o.Key}] = o
	}
	return v
}

// autoLeasable reports whether the owner may lease r's hot keys on its
// own: lease auto, and not a shadow rule (never blocks), a global-scope
// rule (its quota is shared with other regions), an unlimited one, or a
// long window (rules.Rule.Leasable: a calendar window or a period of an
// hour or more, whose leased tokens would come back only at its end).
func autoLeasable(r *rules.Rule) bool {
	return r.Lease == rules.LeaseAuto && !r.Shadow && !r.Global() && !r.Unlimited && r.Leasable()
}

// effective resolves a rule's limit for key at now, honouring an active
// override. blockedFor is the time until a block ends (Never: forever).
func (v *RuleView) effective(cr *CompiledRule, key string, now time.Time) (lim bucket.Limit, blocked bool, blockedFor time.Duration) {
	if len(v.overrides) > 0 {
		if o, ok := v.overrides[ovKey{cr.Rule.ID, key}]; ok && o.Active(now) {
			lim, blocked = rules.Effective(&cr.Rule, &o)
			if blocked {
				if o.ExpiresAt.IsZero() {
					return lim, true, bucket.Never
				}
				return lim, true, o.ExpiresAt.Sub(now)
			}
			return lim, false, 0
		}
	}
	return cr.limit, false, 0
}

// permitMismatch is why an item cannot go to its rule's counter as it is
// (a CodeInvalid answer), or "": a release names a rule without permits,
// or a concurrency rule is checked on a path that cannot give its permit
// back (an Envoy rate limit service descriptor, which sets a per-check
// limit).
func permitMismatch(cr *CompiledRule, it *limit.Item) string {
	conc := cr.limit.Algorithm == bucket.Concurrency
	switch {
	case it.Release != nil && !conc:
		return fmt.Sprintf("rule %q is not a concurrency rule: it holds no permits to release", it.Rule)
	case conc && it.Override != nil:
		return rules.NoReleaseOn("the Envoy rate limit service", it.Rule)
	}
	return ""
}

// floor is the tokens an item of class (its priority; "": the rule's
// priority_default) must leave under lim: the reserves of the rule's other
// classes (rules.Reserves.Floor). 0 for a rule without a reserve.
func (cr *CompiledRule) floor(class string, lim bucket.Limit) int64 {
	if len(cr.Rule.Reserve) == 0 {
		return 0
	}
	if class == "" {
		class = cr.Rule.Class(nil)
	}
	return cr.Rule.Reserve.Floor(class, lim.Capacity())
}

// appliesTo reports whether r limits keys of key's type: key is
// "<r.Key>:<value>" (the gateway SDK builds keys so; a global rule's key
// is "global:global").
func appliesTo(r *rules.Rule, key string) bool {
	return len(key) > len(r.Key) && key[len(r.Key)] == ':' && strings.HasPrefix(key, r.Key)
}
