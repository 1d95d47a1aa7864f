package rls

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Limits on what a request may carry.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 256
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 64
	// MaxValueLen is the longest descriptor key or value, in bytes.
	MaxValueLen = 4096
	// MaxHits is the largest hits_addend.
	MaxHits = 1 << 31
)

// Request is a ShouldRateLimit request in domain terms.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's hits_addend; 0 means 1.
	Hits uint64
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []rules.Entry
	// Hits, when HasHits, is the descriptor's own hits_addend (0 peeks).
	Hits    uint64
	HasHits bool
	// Negative gives the hits back instead of taking them.
	Negative bool
	// Override is the descriptor's limit override (nil: none):
	// RequestsPerUnit per Unit × multiplier. A Unit of 0 is not a unit
	// Weir takes (unknown, month, year).
	Override *Override
}

// Override is a descriptor's limit override.
type Override struct {
	RequestsPerUnit uint32
	Unit            time.Duration // 0: unknown, or a calendar unit
	Multiplier      uint32        // 0 means 1
}

// period is the override's window; 0 when it has none Weir takes.
func (o *Override) period() time.Duration {
	m := max(o.Multiplier, 1)
	if o.Unit <= 0 || time.Duration(m) > (366*24*time.Hour)/o.Unit {
		return 0
	}
	return o.Unit * time.Duration(m)
}

// Code is a decision, as Envoy's RateLimitResponse.Code.
type Code int

// Codes.
const (
	OK Code = iota + 1
	OverLimit
)

// Status is the answer for one descriptor.
type Status struct {
	Code Code
	// Rule names the reported limit; empty when no rule applied.
	Rule      string
	Limit     int64
	Remaining int64
	Window    time.Duration
	Reset     time.Duration
	// RetryAfter is the wait before the same hits would pass (denied only).
	RetryAfter time.Duration
	// Shadow: the reported rule is a shadow rule (never over the limit).
	Shadow bool
	// Unlimited: an unlimited rule matched and nothing was checked.
	Unlimited bool
}

// Response is the answer for a request.
type Response struct {
	Overall  Code
	Statuses []Status
	// Headers are the rate-limit fields for Envoy to add to the response
	// (Config.HeaderStyle), with Retry-After when over the limit.
	Headers []headers.Field
}

// invalid is a request-level validation error (ErrInvalid).
func invalid(format string, args ...any) error {
	return limit.Errorf(limit.ErrInvalid, format, args...)
}

// validate checks the shape of a request.
func validate(r *Request) error {
	switch {
	case r.Domain == "":
		return invalid("domain: must not be empty")
	case len(r.Domain) > rules.MaxDomainLen:
		return invalid("domain: is %d bytes long; at most %d", len(r.Domain), rules.MaxDomainLen)
	case !utf8.ValidString(r.Domain):
		return invalid("domain: is not valid UTF-8")
	case len(r.Descriptors) == 0:
		return invalid("descriptors: none given")
	case len(r.Descriptors) > MaxDescriptors:
		return invalid("descriptors: %d in one request; at most %d", len(r.Descriptors), MaxDescriptors)
	case r.Hits > MaxHits:
		return invalid("hits_addend: %d is over %d", r.Hits, uint64(MaxHits))
	}
	for i, d := range r.Descriptors {
		switch {
		case len(d.Entries) == 0:
			return invalid("descriptors[%d]: has no entries", i)
		case len(d.Entries) > MaxEntries:
			return invalid("descriptors[%d]: %d entries; at most %d", i, len(d.Entries), MaxEntries)
		case d.HasHits && d.Hits > MaxHits:
			return invalid("descriptors[%d].hits_addend: %d is over %d", i, d.Hits, uint64(MaxHits))
		case d.Override != nil && d.Override.RequestsPerUnit == 0:
			return invalid("descriptors[%d].limit.requests_per_unit: must be > 0", i)
		case d.Override != nil && d.Override.period() == 0:
			return invalid("descriptors[%d].limit: unit must be second, minute, hour or day, and the window at most a year", i)
		}
		for j, e := range d.Entries {
			switch {
			case e.Key == "":
				return invalid("descriptors[%d].entries[%d].key: must not be empty", i, j)
			case len(e.Key) > MaxValueLen || len(e.Value) > MaxValueLen:
				return invalid("descriptors[%d].entries[%d]: key and value may be at most %d bytes", i, j, MaxValueLen)
			case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value):
				return invalid("descriptors[%d].entries[%d]: key and value must be valid UTF-8", i, j)
			}
		}
	}
	return nil
}

// hits is the cost of descriptor d.
func (r *Request) hits(d *Descriptor) int64 {
	if d.HasHits {
		return int64(d.Hits)
	}
	if r.Hits == 0 {
		return 1
	}
	return int64(r.Hits)
}

// checked is one item of a plan: the descriptor it answers for, and its
// rule.
type checked struct {
	desc int
	rule *rules.Rule
}

// plan turns a valid request into items: one per rule that applies to a
// descriptor (after "replaces"; unlimited rules check nothing). With
// allOrNothing every item is in group 1; otherwise descriptor i is group
// i+1.
func plan(m *rules.DescriptorMatcher, r *Request, allOrNothing bool) ([]limit.Item, []checked, []bool) {
	if !m.HasDomain(r.Domain) {
		return nil, nil, nil
	}
	var buf [8]*rules.Rule
	var all []*rules.Rule
	per := make([][]*rules.Rule, len(r.Descriptors))
	for i := range r.Descriptors {
		per[i] = m.Match(r.Domain, r.Descriptors[i].Entries, buf[:0:0])
		all = append(all, per[i]...)
	}
	replaced := rules.Replaced(all)
	var items []limit.Item
	var where []checked
	unlimited := make([]bool, len(r.Descriptors))
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		var key string
		for _, rule := range per[i] {
			if rule.Unlimited && !replaced[rule.ID] {
				unlimited[i] = true
			}
			if rule.Unlimited || replaced[rule.ID] {
				continue
			}
			if key == "" {
				key = descriptorKey(r.Domain, d.Entries)
			}
			g := uint32(1)
			if !allOrNothing {
				g = uint32(i + 1)
			}
			it := limit.Item{Key: key, Rule: rule.ID, Cost: r.hits(d), Refund: d.Negative, Group: g}
			if o := d.Override; o != nil {
				it.Override = &limit.Override{Rate: int64(o.RequestsPerUnit), Period: o.period()}
			}
			items = append(items, it)
			where = append(where, checked{desc: i, rule: rule})
		}
	}
	return items, where, unlimited
}

// descriptorKey is the limited key of a descriptor's values in domain:
// "rls:<domain>|k=v|k=v". One that would be longer than limit.MaxKeyLen
// has its entries replaced by "~" and their xxhash64 in hex.
func descriptorKey(domain string, es []rules.Entry) string {
	var b strings.Builder
	b.WriteString("rls:")
	b.WriteString(domain)
	head := b.Len()
	for _, e := range es {
		b.WriteByte('|')
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	if b.Len() <= limit.MaxKeyLen {
		return b.String()
	}
	s := b.String()
	return s[:head] + "|~" + strconv.FormatUint(xxhash.Sum64String(s[head:]), 16)
}

// answer turns the results of plan's items into the response. A
// descriptor is OVER_LIMIT when a non-shadow rule of it was denied (not
// merely voided by another descriptor's denial); a rule that could not be
// decided follows its fail mode (closed: over the limit). Its status
// reports the denying limit with the longest wait, else the limit with the
// fewest remaining.
func answer(r *Request, items []limit.Item, where []checked, unlimited []bool, res []limit.Result, style headers.Style) Response {
	out := Response{Overall: OK, Statuses: make([]Status, len(r.Descriptors))}
	for i := range out.Statuses {
		out.Statuses[i].Code = OK
		out.Statuses[i].Unlimited = unlimited != nil && unlimited[i]
	}
	have := make([]bool, len(r.Descriptors))
	var policy *Status
	var retry time.Duration
	for j, w := range where {
		x := &res[j]
		st := Status{Code: OK, Shadow: w.rule.Shadow, Rule: w.rule.ID, Limit: x.Limit, Remaining: x.Remaining, Window: x.Window, Reset: x.Reset}
		if st.Window == 0 {
			st.Window = w.rule.Period.D()
		}
		denied := false
		switch {
		case x.Code != limit.CodeNone:
			denied = w.rule.FailMode == rules.FailClosed && !w.rule.Shadow
			st.RetryAfter = max(w.rule.Period.D(), time.Second)
		case w.rule.Shadow, x.Voided, x.Allowed, items[j].Refund:
		default:
			denied = true
			st.RetryAfter = x.RetryAfter
			if st.RetryAfter == limit.Never || st.RetryAfter <= 0 {
				st.RetryAfter = max(st.Window, time.Second)
			}
		}
		if denied {
			st.Code = OverLimit
		}
		cur := &out.Statuses[w.desc]
		if w.rule.Shadow && have[w.desc] {
			continue
		}
		switch {
		case !have[w.desc]:
			*cur = st
		case st.Code == OverLimit && (cur.Code != OverLimit || st.RetryAfter > cur.RetryAfter):
			*cur = st
		case cur.Code != OverLimit && st.Code != OverLimit && st.Remaining < cur.Remaining:
			*cur = st
		}
		have[w.desc] = !w.rule.Shadow || have[w.desc]
	}
	for i := range out.Statuses {
		s := &out.Statuses[i]
		if s.Rule == "" || s.Shadow {
			continue
		}
		if s.Code == OverLimit {
			out.Overall = OverLimit
			if s.RetryAfter > retry {
				retry, policy = s.RetryAfter, s
			}
		} else if out.Overall == OK && (policy == nil || s.Remaining < policy.Remaining) {
			policy = s
		}
	}
	if policy != nil {
		out.Headers = headers.Fields(style, &headers.Policy{Name: policy.Rule, Limit: policy.Limit, Remaining: policy.Remaining,
			Reset: policy.Reset, Window: policy.Window}, out.Overall == OverLimit, retry)
	}
	return out
}
