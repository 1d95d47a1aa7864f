package rules

import (
	"slices"
	"strings"
)

// AppliesToPlan reports whether the rule with id applies to requests of
// plan, as matching decides it: a rule for that plan does, and a rule for
// every plan ("*") does unless a rule for that plan with the same route,
// method and key replaces it. An unknown id does not apply.
func (m *Matcher) AppliesToPlan(id, plan string) bool {
	r, ok := m.byID[id]
	if !ok {
		return false
	}
	if r.Match.Plan != AnyPlan {
		return r.Match.Plan == plan
	}
	i, _ := slices.BinarySearchFunc(m.rules, id, func(r Rule, id string) int { return strings.Compare(r.ID, id) })
	_, replaced := m.info[i].replacedBy[plan]
	return !replaced
}
