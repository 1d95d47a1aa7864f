package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Set is one version of everything the rules group stores: the rules,
// sorted by ID, and the overrides, sorted by (Rule, Key). Version is the
// Raft index of the change that produced it.
type Set struct {
	Version   uint64
	Rules     []Rule
	Overrides []Override
}

// NewSet returns a Set holding sorted copies of rs and os.
func NewSet(version uint64, rs []Rule, os []Override) *Set {
	s := &Set{Version: version, Rules: slices.Clone(rs), Overrides: slices.Clone(os)}
	slices.SortFunc(s.Rules, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(s.Overrides, compareOverride)
	return s
}

func compareOverride(a, b Override) int {
	if c := strings.Compare(a.Rule, b.Rule); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// Rule returns the rule with the given id. s.Rules must be sorted by ID.
func (s *Set) Rule(id string) (Rule, bool) {
	i, ok := slices.BinarySearchFunc(s.Rules, id, func(r Rule, id string) int { return strings.Compare(r.ID, id) })
	if !ok {
		return Rule{}, false
	}
	return s.Rules[i], true
}

// Override returns the override for (rule, key). s.Overrides must be
// sorted by (Rule, Key).
func (s *Set) Override(rule, key string) (Override, bool) {
	i, ok := slices.BinarySearchFunc(s.Overrides, Override{Rule: rule, Key: key}, compareOverride)
	if !ok {
		return Override{}, false
	}
	return s.Overrides[i], true
}

// DiffSets describes how newRules differs from oldRules, one line per change,
// sorted by rule id: "+ id" for an added rule, "- id" for a removed one and
// "~ id: field old -> new" for each changed field (fields in file order,
// named as in rules.yaml). Rules are compared normalized, so writing out a
// default is not a change. Unchanged rules give no line.
func DiffSets(oldRules, newRules []Rule) []string {
	before := make(map[string]Rule, len(oldRules))
	for _, r := range oldRules {
		before[r.ID] = Normalize(r)
	}
	after := make(map[string]Rule, len(newRules))
	for _, r := range newRules {
		after[r.ID] = Normalize(r)
	}
	ids := make([]string, 0, len(before)+len(after))
	for id := range before {
		ids = append(ids, id)
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)

	var out []string
	for _, id := range ids {
		a, inOld := before[id]
		b, inNew := after[id]
		switch {
		case !inOld:
			out = append(out, "+ "+id)
		case !inNew:
			out = append(out, "- "+id)
		default:
			for _, f := range diffFields(a, b) {
				out = append(out, fmt.Sprintf("~ %s: %s %v -> %v", id, f.name, f.old, f.new))
			}
		}
	}
	return out
}

// DiffOverrides describes how newOvs differs from oldOvs, one line per
// change, sorted by (rule, key) as in a Set: "+ override K for rule R" for
// an added override, "- override K for rule R" for a removed one and
// "~ override K for rule R: field old -> new" for each changed field
// (named as in the API: rate, burst, block, expires_at). A burst of 0 is
// compared as the rate it stands for. Unchanged overrides give no line.
func DiffOverrides(oldOvs, newOvs []Override) []string {
	type id struct{ rule, key string }
	before := make(map[id]Override, len(oldOvs))
	for _, o := range oldOvs {
		before[id{o.Rule, o.Key}] = o
	}
	after := make(map[id]Override, len(newOvs))
	for _, o := range newOvs {
		after[id{o.Rule, o.Key}] = o
	}
	all := slices.SortedFunc(slices.Values(slices.Concat(oldOvs, newOvs)), compareOverride)
	all = slices.CompactFunc(all, func(a, b Override) bool { return compareOverride(a, b) == 0 })

	var out []string
	for _, o := range all {
		name := fmt.Sprintf("override %s for rule %s", o.Key, o.Rule)
		a, inOld := before[id{o.Rule, o.Key}]
		b, inNew := after[id{o.Rule, o.Key}]
		switch {
		case !inOld:
			out = append(out, "+ "+name)
		case !inNew:
			out = append(out, "- "+name)
		default:
			for _, f := range diffOverrideFields(a, b) {
				out = append(out, fmt.Sprintf("~ %s: %s %v -> %v", name, f.name, f.old, f.new))
			}
		}
	}
	return out
}

type fieldChange struct {
	name     string
	old, new any
}

type fieldChanges []fieldChange

func (cs *fieldChanges) add(name string, x, y any) {
	if x != y {
		*cs = append(*cs, fieldChange{name, x, y})
	}
}

func diffFields(a, b Rule) []fieldChange {
	var cs fieldChanges
	cs.add("match.route", a.Match.Route, b.Match.Route)
	cs.add("match.method", a.Match.Method, b.Match.Method)
	cs.add("match.plan", a.Match.Plan, b.Match.Plan)
	cs.add("key", a.Key, b.Key)
	cs.add("algorithm", a.Algorithm, b.Algorithm)
	cs.add("rate", a.Rate, b.Rate)
	cs.add("period", a.Period, b.Period)
	cs.add("calendar", a.Calendar, b.Calendar)
	cs.add("timezone", a.Timezone, b.Timezone)
	cs.add("burst", a.Burst, b.Burst)
	cs.add("fail_mode", a.FailMode, b.FailMode)
	cs.add("timeout", a.Timeout, b.Timeout)
	cs.add("shadow", a.Shadow, b.Shadow)
	cs.add("lease", a.Lease, b.Lease)
	cs.add("max_keys", a.MaxKeys, b.MaxKeys)
	cs.add("cost", a.Cost, b.Cost)
	cs.add("cost_header", a.CostHeader, b.CostHeader)
	cs.add("events.sample", a.Events.Sample, b.Events.Sample)
	cs.add("events.redact", a.Events.Redact, b.Events.Redact)
	cs.add("match.domain", a.Match.Domain, b.Match.Domain)
	cs.add("match.descriptor", FormatEntries(a.Match.Descriptor), FormatEntries(b.Match.Descriptor))
	cs.add("replaces", strings.Join(a.Replaces, ","), strings.Join(b.Replaces, ","))
	cs.add("unlimited", a.Unlimited, b.Unlimited)
	cs.add("limit", a.Concurrency, b.Concurrency)
	cs.add("permit_ttl", a.PermitTTL, b.PermitTTL)
	cs.add("priority_header", a.PriorityHeader, b.PriorityHeader)
	cs.add("priority_default", a.PriorityDefault, b.PriorityDefault)
	cs.add("reserve", formatReserves(a.Reserve), formatReserves(b.Reserve))
	return cs
}

func diffOverrideFields(a, b Override) []fieldChange {
	burst := func(o Override) int64 {
		if o.Burst == 0 && !o.Block {
			return o.Rate
		}
		return o.Burst
	}
	expires := func(o Override) string {
		if o.ExpiresAt.IsZero() {
			return "never"
		}
		return o.ExpiresAt.UTC().Format(time.RFC3339)
	}
	var cs fieldChanges
	cs.add("rate", a.Rate, b.Rate)
	cs.add("burst", burst(a), burst(b))
	cs.add("block", a.Block, b.Block)
	cs.add("expires_at", expires(a), expires(b))
	return cs
}

// CheckCount refuses a rule set of n rules when n is over MaxRules.
func CheckCount(n int) error {
	if n > MaxRules {
		return errOf([]Problem{{Field: "rules", Msg: fmt.Sprintf("the set would hold %d rules; a rule set holds at most %d", n, MaxRules)}})
	}
	return nil
}

// Merge returns the rule list an apply of in leaves over cur: the rules of
// in replace those of cur with the same id and the others are added (with
// replaceAll, the list is exactly in), every rule of in normalized, sorted
// by id. It refuses, with a *ValidationError: no rules unless replaceAll
// (that would be a no-op or a mistake), rules of in that are invalid
// (checked in the order given, so problems name the caller's indexes and
// an id sent twice is refused), and a merged list of more than MaxRules.
//
// It is the one merge: the Raft FSM applies it and the API's dry run and
// diff preview it, so a preview and the write agree.
func Merge(cur, in []Rule, replaceAll bool) ([]Rule, error) {
	if len(in) == 0 && !replaceAll {
		return nil, errOf([]Problem{{Field: "rules", Msg: "none given (to delete every rule, apply an empty list with replace_all)"}})
	}
	given := make([]Rule, len(in))
	for i, r := range in {
		given[i] = Normalize(r)
	}
	if err := Validate(given); err != nil {
		return nil, err
	}
	replaced := make(map[string]bool, len(given))
	for _, r := range given {
		replaced[r.ID] = true
	}
	out := make([]Rule, 0, len(cur)+len(given))
	if !replaceAll {
		for _, r := range cur {
			if !replaced[r.ID] {
				out = append(out, r)
			}
		}
	}
	out = append(out, given...)
	if err := CheckCount(len(out)); err != nil {
		return nil, err
	}
	// Only what changed is validated: cur was valid when it was written,
	// and given has no duplicate ids, so out has none either.
	slices.SortFunc(out, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// FormatEntries writes a descriptor pattern as "key=value,key" (diffs,
// listings).
func FormatEntries(es []Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('=')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
