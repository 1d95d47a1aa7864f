package rules

import (
	"slices"
	"strings"
)

// Matcher finds the rules that apply to a request. It is built once per
// rule set by Compile and is immutable afterwards, so any number of
// goroutines may call Match at once.
//
// Routes are matched segment by segment against a trie of the patterns:
//   - a static segment matches itself (case-sensitive);
//   - a {param} segment matches any one non-empty segment;
//   - a final "*" matches the prefix before it and anything below it:
//     "/v1/*" matches "/v1", "/v1/", "/v1/orders" and "/v1/orders/7".
//
// Request routes are read as paths: a query string is dropped, empty
// segments are skipped ("/v1//orders/" is "/v1/orders", so a trailing slash
// cannot dodge a limit) and "." and ".." are resolved. Methods are compared
// exactly (HTTP methods are case-sensitive); plans too.
type Matcher struct {
	rules []Rule // normalized, sorted by ID; Match hands out pointers into it
	info  []ruleInfo
	byID  map[string]*Rule
	root  *node
}

type ruleInfo struct {
	anyMethod bool
	anyPlan   bool
	// replacedBy holds the explicit plans of rules in the same (route
	// pattern, method pattern, key) group; a plan "*" rule does not apply
	// to a request whose plan is in it. Nil when the group has none.
	replacedBy map[string]struct{}
}

type node struct {
	static map[string]*node
	param  *node
	end    []int32 // rules whose pattern ends here
	tail   []int32 // rules whose pattern ends here with "/*"
}

// Compile validates rs and builds a Matcher over normalized copies of them.
// The error is Validate's.
func Compile(rs []Rule) (*Matcher, error) {
	if err := Validate(rs); err != nil {
		return nil, err
	}
	m := &Matcher{
		rules: make([]Rule, len(rs)),
		info:  make([]ruleInfo, len(rs)),
		byID:  make(map[string]*Rule, len(rs)),
		root:  &node{},
	}
	for i, r := range rs {
		m.rules[i] = Normalize(r)
	}
	slices.SortFunc(m.rules, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) })

	groups := map[string]map[string]struct{}{}
	groupOf := make([]string, len(m.rules))
	for i := range m.rules {
		r := &m.rules[i]
		m.byID[r.ID] = r
		if r.Match.Domain != "" { // matched by DescriptorMatcher only
			continue
		}
		p, err := parseRoute(r.Match.Route)
		if err != nil { // Validate accepted it, so this cannot happen.
			panic("rules: validated route does not parse: " + err.Error())
		}
		m.insert(p, int32(i))
		g := p.canonical() + "\x00" + r.Match.Method + "\x00" + r.Key
		groupOf[i] = g
		if r.Match.Plan != AnyPlan {
			if groups[g] == nil {
				groups[g] = map[string]struct{}{}
			}
			groups[g][r.Match.Plan] = struct{}{}
		}
		m.info[i] = ruleInfo{anyMethod: r.Match.Method == AnyMethod, anyPlan: r.Match.Plan == AnyPlan}
	}
	for i := range m.rules {
		if m.info[i].anyPlan {
			m.info[i].replacedBy = groups[groupOf[i]]
		}
	}
	return m, nil
}

func (m *Matcher) insert(p pattern, idx int32) {
	n := m.root
	for _, s := range p.segs {
		if s.param {
			if n.param == nil {
				n.param = &node{}
			}
			n = n.param
			continue
		}
		if n.static == nil {
			n.static = map[string]*node{}
		}
		c := n.static[s.static]
		if c == nil {
			c = &node{}
			n.static[s.static] = c
		}
		n = c
	}
	if p.wildcard {
		n.tail = append(n.tail, idx)
	} else {
		n.end = append(n.end, idx)
	}
}

// Match appends to dst the rules that apply to a request for route with
// method and plan, sorted by ID, and returns the extended slice. The
// pointers refer to the Matcher's own copies: read them, never write.
//
// Every matching rule applies, except that a rule with plan "*" is left
// out when a rule of the same route pattern, method pattern and key names
// the request's plan explicitly (a "pro" rule replaces the default one for
// pro callers; several windows of either kind all apply). Match does not
// allocate when dst has room.
func (m *Matcher) Match(route, method, plan string, dst []*Rule) []*Rule {
	start := len(dst)
	dst = m.walk(m.root, cleanRequestRoute(route), method, plan, dst)
	// Insertion sort of the (few) appended rules, by ID.
	out := dst[start:]
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return dst
}

func (m *Matcher) walk(n *node, route, method, plan string, dst []*Rule) []*Rule {
	dst = m.appendMatching(n.tail, method, plan, dst)
	seg, rest, ok := nextSegment(route)
	if !ok {
		return m.appendMatching(n.end, method, plan, dst)
	}
	if c := n.static[seg]; c != nil {
		dst = m.walk(c, rest, method, plan, dst)
	}
	if n.param != nil {
		dst = m.walk(n.param, rest, method, plan, dst)
	}
	return dst
}

func (m *Matcher) appendMatching(idxs []int32, method, plan string, dst []*Rule) []*Rule {
	for _, i := range idxs {
		r, info := &m.rules[i], &m.info[i]
		if !info.anyMethod && r.Match.Method != method {
			continue
		}
		if info.anyPlan {
			if info.replacedBy != nil {
				if _, replaced := info.replacedBy[plan]; replaced {
					continue
				}
			}
		} else if r.Match.Plan != plan {
			continue
		}
		dst = append(dst, r)
	}
	return dst
}

// Rule returns the compiled (normalized) rule with the given id.
func (m *Matcher) Rule(id string) (*Rule, bool) {
	r, ok := m.byID[id]
	return r, ok
}

// Len returns the number of rules in the matcher.
func (m *Matcher) Len() int { return len(m.rules) }
