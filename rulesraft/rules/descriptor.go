package rules

import (
	"slices"
	"strings"
)

// DescriptorMatcher finds the rules that apply to the descriptors of an
// Envoy rate limit service request: rules with a Match.Domain. It is built
// once per rule set by CompileDescriptors and is immutable afterwards, so
// any number of goroutines may call Match at once.
//
// A rule applies to a descriptor of a request in its domain when the
// descriptor has exactly as many entries as the rule's pattern and every
// entry matches the pattern's entry at the same level: the same key, and a
// value the pattern's value accepts (see Entry). As in
// envoyproxy/ratelimit, only the most specific patterns apply: patterns are
// compared level by level, an exact value beating a prefix wildcard (a
// longer prefix beating a shorter one) beating any value. Several rules
// with equally specific patterns all apply (several windows for one
// descriptor). An unlimited rule takes part like any other; the caller
// checks nothing for it.
type DescriptorMatcher struct {
	byDomain map[string][]*Rule // normalized, sorted by ID
}

// CompileDescriptors validates rs and builds a DescriptorMatcher over
// normalized copies of the rules that have a domain. The error is
// Validate's.
func CompileDescriptors(rs []Rule) (*DescriptorMatcher, error) {
	if err := Validate(rs); err != nil {
		return nil, err
	}
	m := &DescriptorMatcher{byDomain: map[string][]*Rule{}}
	for _, r := range rs {
		if r.Match.Domain == "" {
			continue
		}
		n := Normalize(r)
		m.byDomain[r.Match.Domain] = append(m.byDomain[r.Match.Domain], &n)
	}
	for _, l := range m.byDomain {
		slices.SortFunc(l, func(a, b *Rule) int { return strings.Compare(a.ID, b.ID) })
	}
	return m, nil
}

// HasDomain reports whether any rule names domain.
func (m *DescriptorMatcher) HasDomain(domain string) bool { return len(m.byDomain[domain]) > 0 }

// Match appends to dst the rules that apply to one descriptor (its
// entries, in order) of a request in domain, sorted by ID, and returns the
// extended slice. The pointers refer to the matcher's own copies: read
// them, never write.
func (m *DescriptorMatcher) Match(domain string, entries []Entry, dst []*Rule) []*Rule {
	start := len(dst)
	var best, score [MaxDescriptorEntries]int
	found := false
	for _, r := range m.byDomain[domain] {
		if !entryScore(r.Match.Descriptor, entries, &score) {
			continue
		}
		n := len(entries)
		switch c := slices.Compare(score[:n], best[:n]); {
		case !found || c > 0:
			dst, best, found = append(dst[:start], r), score, true
		case c == 0:
			dst = append(dst, r)
		}
	}
	return dst
}

// entryScore matches a pattern against a descriptor's entries and writes
// how specific the match is, level by level, into score: 0 for any value,
// 1+len(prefix) for a prefix wildcard, and a value above every prefix for
// an exact value.
func entryScore(pattern, entries []Entry, score *[MaxDescriptorEntries]int) bool {
	if len(pattern) != len(entries) || len(pattern) > MaxDescriptorEntries {
		return false
	}
	for i, p := range pattern {
		e := entries[i]
		if p.Key != e.Key {
			return false
		}
		switch {
		case p.Value == "" || p.Value == "*":
			score[i] = 0
		case strings.HasSuffix(p.Value, "*"):
			prefix := p.Value[:len(p.Value)-1]
			if !strings.HasPrefix(e.Value, prefix) {
				return false
			}
			score[i] = 1 + len(prefix)
		default:
			if p.Value != e.Value {
				return false
			}
			score[i] = 1 << 30
		}
	}
	return true
}

// Replaced returns the ids of matched rules that another matched rule
// replaces (Rule.Replaces), as envoyproxy/ratelimit's "replaces": those do
// not apply to the request. Nil when none is.
func Replaced(matched []*Rule) map[string]bool {
	var out map[string]bool
	for _, r := range matched {
		for _, id := range r.Replaces {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}
