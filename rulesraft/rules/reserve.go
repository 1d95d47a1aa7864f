package rules

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// DefaultPriorityClass is the class of a request without a priority
// header, when the rule names no priority_default.
const DefaultPriorityClass = "default"

// Share is a percentage of a rule's capacity, written "20%" (or 20).
type Share int64

// String is the rules-file form: "20%".
func (s Share) String() string { return strconv.FormatInt(int64(s), 10) + "%" }

// ParseShare reads "20%" or "20".
func ParseShare(v string) (Share, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "%")), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a percentage such as 20%%", v)
	}
	return Share(n), nil
}

// MarshalJSON writes "20%".
func (s Share) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads "20%" or 20.
func (s *Share) UnmarshalJSON(b []byte) error {
	v := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
	}
	p, err := ParseShare(v)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	*s = p
	return nil
}

// MarshalYAML writes "20%".
func (s Share) MarshalYAML() (any, error) { return s.String(), nil }

// Reserves are a rule's reserve: the share of its capacity kept for each
// named class of requests. A request is shed (refused with 503, "shed",
// not 429) when taking it would leave fewer tokens than the reserves of
// the classes other than its own: a class named here may use its own
// reserve and the unreserved capacity; any other class only the
// unreserved capacity.
type Reserves map[string]Share

// Floor is the tokens a request of class must leave in a bucket of
// capacity: the reserves of every other class, rounded up.
func (rs Reserves) Floor(class string, capacity int64) int64 {
	var pct int64
	for c, s := range rs {
		if c != class {
			pct += int64(s)
		}
	}
	if pct <= 0 || capacity <= 0 {
		return 0
	}
	return (capacity*pct + 99) / 100
}

// Class is the priority class of a request under r: the value of its
// priority header (header reads it), else priority_default, else
// DefaultPriorityClass.
func (r *Rule) Class(header func(name string) string) string {
	if r.PriorityHeader != "" && header != nil {
		if v := strings.TrimSpace(header(r.PriorityHeader)); v != "" {
			return v
		}
	}
	if r.PriorityDefault != "" {
		return r.PriorityDefault
	}
	return DefaultPriorityClass
}

// checkReserve checks the reserve fields of a rule (any algorithm: only
// a token bucket takes them).
func (r Rule) checkReserve(ps *problems, alg string) {
	if len(r.Reserve) == 0 {
		if r.PriorityHeader != "" || r.PriorityDefault != "" {
			ps.add("reserve", "priority_header and priority_default need a reserve (e.g. {critical: 20%%})")
		}
		return
	}
	if alg != AlgTokenBucket {
		ps.add("reserve", "only a token_bucket rule (one shared capacity) takes a reserve, not %s", alg)
	}
	if r.PriorityHeader == "" {
		ps.add("priority_header", "a rule with a reserve needs the header that names a request's class, e.g. X-Priority")
	} else if !isToken(r.PriorityHeader) {
		ps.add("priority_header", "%q is not an HTTP header name", r.PriorityHeader)
	}
	if c := r.PriorityDefault; c != "" && !isToken(c) {
		ps.add("priority_default", "%q is not a class name (letters, digits, and !#$%%&'*+-.^_`|~)", c)
	}
	var total int64
	for _, c := range slices.Sorted(maps.Keys(r.Reserve)) {
		s := r.Reserve[c]
		switch {
		case !isToken(c):
			ps.add("reserve", "%q is not a class name", c)
		case s < 1 || s > 99:
			ps.add("reserve", "%s: %s must be from 1%% to 99%%", c, s)
		}
		total += int64(s)
	}
	if total >= 100 {
		ps.add("reserve", "the reserves add up to %d%%; they must leave some capacity to every class (under 100%%)", total)
	}
	if r.Lease > 0 {
		ps.add("lease", "a rule with a reserve is never leased: the owner alone knows how much is left")
	}
	if r.Shadow {
		ps.add("reserve", "a shadow rule never sheds: leave out shadow or the reserve")
	}
}

// formatReserves writes rs as "{critical: 20%}", classes sorted.
func formatReserves(rs Reserves) string {
	if len(rs) == 0 {
		return ""
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(rs)) {
		parts = append(parts, c+": "+rs[c].String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
