package rulesraft

import (
	"fmt"
	"slices"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// checkFeatures refuses, before it enters the log, a command whose rules
// use a feature (rules.Features) that some live member does not advertise
// (Config.MemberFeatures), naming the member and the feature: an older
// member would store a rule it cannot read, and the rule set would split.
// Commands that add no rules, and stores without MemberFeatures, pass.
func (s *Store) checkFeatures(cmd Command) error {
	if s.cfg.MemberFeatures == nil {
		return nil
	}
	var rs []rules.Rule
	switch cmd.Op {
	case OpApply:
		rs = cmd.Rules
	case OpRollback:
		set, err := s.fsm.SetAt(cmd.Version)
		if err != nil {
			return err
		}
		rs = set.Rules
	default:
		return nil
	}
	used, first := rules.RulesFeatures(rs)
	return missingFeature(used, first, s.cfg.MemberFeatures())
}

// missingFeature is the refusal of the features used (with the first rule
// using each) by members (features by member id), or nil when every
// member supports all of them.
func missingFeature(used []string, first map[string]string, members map[string][]string) error {
	if len(used) == 0 {
		return nil
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, f := range used {
		for _, id := range ids {
			if !slices.Contains(members[id], f) {
				return fmt.Errorf("%w: rule %q uses %q, which member %s does not support (an older version?): upgrade every member, or let %s leave, then write again",
					ErrUnsupported, first[f], f, id, id)
			}
		}
	}
	return nil
}
