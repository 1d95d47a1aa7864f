package node

import (
	"fmt"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// permitMismatch is why an item cannot go to its rule's counter as it is
// (a CodeInvalid answer), or "": a release names a rule without permits,
// or a concurrency rule is checked on a path that cannot give its permit
// back (an Envoy rate limit service descriptor, which sets a per-check
// limit).
func permitMismatch(cr *compiledRule, it *limit.Item) string {
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
func (cr *compiledRule) floor(class string, lim bucket.Limit) int64 {
	if len(cr.rule.Reserve) == 0 {
		return 0
	}
	if class == "" {
		class = cr.rule.Class(nil)
	}
	return cr.rule.Reserve.Floor(class, lim.Capacity())
}
