package rules

import (
	"encoding/json"
	"slices"
	"strconv"
)

// A feature is a name for rule fields and algorithms added after the first
// release (Field.Feature, AlgorithmRow.Feature). Members gossip the
// features their binary supports; the Raft leader refuses a rule-set write
// that uses a feature some live member does not advertise, so a rolling
// upgrade never splits the rule set: an older member never meets a rule it
// would read differently. The tables in fields.go are the one list.

// Features of this version.
const (
	// FeatureConcurrency: algorithm: concurrency, limit and permit_ttl.
	FeatureConcurrency = "concurrency"
	// FeatureReserve: priority_header, priority_default and reserve.
	FeatureReserve = "reserve"
)

// AlgorithmRow is one algorithm name a rule may give, with the feature a
// member must support to store it ("" for those every version knows).
type AlgorithmRow struct {
	Name    string
	Feature string
}

// Algorithms are the algorithm names a rule may give (aliases excluded).
func Algorithms() []AlgorithmRow {
	return []AlgorithmRow{
		{AlgTokenBucket, ""},
		{AlgLeakyBucket, ""},
		{AlgFixedWindow, ""},
		{AlgSlidingWindow, ""},
		{AlgSlidingLog, ""},
		{AlgConcurrency, FeatureConcurrency},
	}
}

// Features are the features this binary supports: every non-empty
// Feature of the tables, sorted, once each.
func Features() []string {
	var out []string
	for _, f := range RuleFields() {
		if f.Feature != "" {
			out = append(out, f.Feature)
		}
	}
	for _, a := range Algorithms() {
		if a.Feature != "" {
			out = append(out, a.Feature)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Features are the features r uses: those of the fields it sets (a field
// is set when it appears in the rule's JSON form, which omits zero values)
// and of its algorithm, sorted, once each.
func (r *Rule) Features() []string {
	feature := map[string]string{}
	for _, f := range RuleFields() {
		if f.Feature != "" {
			feature[f.Name] = f.Feature
		}
	}
	var out []string
	for _, a := range Algorithms() {
		if a.Feature != "" && canonicalAlgorithm(r.Algorithm) == a.Name {
			out = append(out, a.Feature)
		}
	}
	if len(feature) > 0 {
		b, err := json.Marshal(r)
		if err != nil {
			panic("rules: a Rule does not encode: " + err.Error()) // every field type encodes
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		for _, path := range setPaths(m, "") {
			if f := feature[path]; f != "" {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// setPaths lists the field paths present in a rule's JSON form as the
// tables write them ("match.route", "match.descriptor[].key").
func setPaths(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		path := prefix + k
		out = append(out, path)
		switch v := v.(type) {
		case map[string]any:
			out = append(out, setPaths(v, path+".")...)
		case []any:
			for _, e := range v {
				if sub, ok := e.(map[string]any); ok {
					out = append(out, setPaths(sub, path+"[].")...)
				}
			}
		}
	}
	return out
}

// RulesFeatures are the features any of rs uses, sorted, once each, with
// for each the id of the first rule that uses it.
func RulesFeatures(rs []Rule) (features []string, firstRule map[string]string) {
	firstRule = map[string]string{}
	for i := range rs {
		for _, f := range rs[i].Features() {
			if _, ok := firstRule[f]; !ok {
				firstRule[f] = rs[i].ID
				features = append(features, f)
			}
		}
	}
	slices.Sort(features)
	return features, firstRule
}

// HoldsPermits reports whether r is a concurrency rule: an allowed check
// takes a permit that the caller must release (or that expires).
func (r *Rule) HoldsPermits() bool { return canonicalAlgorithm(r.Algorithm) == AlgConcurrency }

// NoReleaseOn is the answer of an edge that cannot release a permit
// (Envoy's rate limit service, forward-auth) for a matched concurrency
// rule.
func NoReleaseOn(edge, rule string) string {
	return "rule " + strconv.Quote(rule) + " limits requests in flight (algorithm: concurrency), and " + edge +
		" cannot release a permit: use the Go SDK middleware, `weir gateway`, or POST /v1/limits/check with POST /v1/limits/release (docs/gateways.md)"
}
