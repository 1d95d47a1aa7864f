// Package envoyrl translates envoyproxy/ratelimit configuration files into
// Weir rules with a domain (rules.Match.Domain), for `weir rules import
// --from envoy-ratelimit`.
//
// A file holds one domain and a tree of descriptors. Every descriptor with
// a rate_limit becomes one rule matching the path of entries from the top
// of the tree to it; a descriptor with neither a rate_limit nor nested
// descriptors (which envoyproxy/ratelimit lets through) and one whose
// rate_limit says unlimited become unlimited rules. shadow_mode becomes
// shadow; name becomes the rule id (or an id is made from the domain and
// the path); replaces lists the ids of the rules with those names.
// detailed_metric is accepted and changes nothing (Weir counts decisions
// per rule). The translation is all or nothing: every problem is listed
// with its file and line, and no rule is returned.
//
// It is pure: it reads the bytes it is given.
package envoyrl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// ErrImport is the error kind of a refused translation (errors.Is).
var ErrImport = errors.New("envoyrl: cannot import")

// File is one configuration file.
type File struct {
	Name string
	Data []byte
}

// Options change the translation.
type Options struct {
	// Algorithm of the rules (default sliding_window; fixed_window counts
	// exactly as envoyproxy/ratelimit does).
	Algorithm string
}

// Problem is one thing that cannot be translated.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return p.File + ": " + p.Msg
}

// Error lists every problem of a refused translation.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d problem(s); nothing imported:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrImport }

// Note is something translated with a remark (a no-op field).
type Note = Problem

// units are the rate_limit units Weir translates (envoyproxy/ratelimit
// reads them in any case).
var units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
}

// Import translates files into rules, or lists every problem.
func Import(files []File, o Options) ([]rules.Rule, []Note, error) {
	if o.Algorithm == "" {
		o.Algorithm = rules.AlgSlidingWindow
	}
	t := &translator{opts: o, ids: map[string]bool{}, names: map[string][]int{}, domains: map[string]string{}}
	for _, f := range files {
		t.file(f)
	}
	t.resolveReplaces()
	if len(t.problems) == 0 {
		if err := rules.Validate(t.rules); err != nil {
			var ve *rules.ValidationError
			if errors.As(err, &ve) {
				for _, p := range ve.Problems {
					t.problems = append(t.problems, Problem{File: "(translated rules)", Msg: p.String()})
				}
			} else {
				t.problems = append(t.problems, Problem{File: "(translated rules)", Msg: err.Error()})
			}
		}
	}
	if len(t.problems) > 0 {
		return nil, nil, &Error{Problems: t.problems}
	}
	return t.rules, t.notes, nil
}

type pending struct {
	file     string
	line     int
	replaces []string // names
}

type translator struct {
	opts     Options
	rules    []rules.Rule
	pend     []pending // per rule
	ids      map[string]bool
	names    map[string][]int // rate_limit name -> rule indexes
	domains  map[string]string
	problems []Problem
	notes    []Note
	fileName string
}

func (t *translator) fail(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	t.problems = append(t.problems, Problem{File: t.fileName, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (t *translator) file(f File) {
	t.fileName = f.Name
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		t.fail(nil, "not YAML: %v", err)
		return
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		t.fail(nil, "file is empty; want domain: and descriptors:")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		t.fail(root, "the top level must be a mapping with domain and descriptors")
		return
	}
	var domain string
	var descs *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "domain":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				t.fail(v, "domain must be a non-empty string")
				return
			}
			domain = v.Value
			if prev, dup := t.domains[domain]; dup {
				t.fail(v, "domain %q is also in %s (envoyproxy/ratelimit requires each domain once)", domain, prev)
				return
			}
			t.domains[domain] = f.Name
		case "descriptors":
			descs = v
		default:
			t.fail(k, "unknown top-level field %q (want domain, descriptors)", k.Value)
		}
	}
	if domain == "" {
		t.fail(root, "missing domain")
		return
	}
	if descs == nil {
		return
	}
	t.descriptors(domain, descs, nil)
}

func (t *translator) descriptors(domain string, n *yaml.Node, path []rules.Entry) {
	if n.Kind != yaml.SequenceNode {
		t.fail(n, "descriptors must be a list")
		return
	}
	for _, d := range n.Content {
		t.descriptor(domain, d, path)
	}
}

func (t *translator) descriptor(domain string, n *yaml.Node, path []rules.Entry) {
	if n.Kind != yaml.MappingNode {
		t.fail(n, "a descriptor must be a mapping (key, value, rate_limit, descriptors)")
		return
	}
	var (
		e                rules.Entry
		keyNode, rl, sub *yaml.Node
		shadow           bool
		bad              bool
	)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "key":
			keyNode, e.Key = v, v.Value
		case "value":
			e.Value = v.Value
			if strings.Contains(strings.TrimSuffix(v.Value, "*"), "*") {
				t.fail(v, "value %q: a wildcard \"*\" may only end a value", v.Value)
				bad = true
			}
		case "rate_limit":
			rl = v
		case "descriptors":
			sub = v
		case "shadow_mode":
			if v.Decode(&shadow) != nil {
				t.fail(v, "shadow_mode must be true or false")
				bad = true
			}
		case "detailed_metric":
			var b bool
			if v.Decode(&b) != nil {
				t.fail(v, "detailed_metric must be true or false")
				bad = true
			} else if b {
				t.notes = append(t.notes, Note{File: t.fileName, Line: v.Line,
					Msg: "detailed_metric: Weir counts decisions per rule (weir_rls_decisions_total), not per value; nothing to translate"})
			}
		default:
			t.fail(k, "unknown descriptor field %q (want key, value, rate_limit, shadow_mode, detailed_metric, descriptors)", k.Value)
			bad = true
		}
	}
	if keyNode == nil || e.Key == "" {
		t.fail(n, "a descriptor needs a key")
		return
	}
	p := append(append([]rules.Entry(nil), path...), e)
	if len(p) > rules.MaxDescriptorEntries {
		t.fail(n, "descriptors nest %d deep; Weir matches at most %d entries", len(p), rules.MaxDescriptorEntries)
		return
	}
	if !bad {
		switch {
		case rl != nil:
			t.rateLimit(domain, rl, p, shadow, n.Line)
		case sub == nil: // neither a limit nor nested descriptors: let through
			t.add(domain, p, rules.Rule{Unlimited: true, Shadow: shadow}, "", nil, n.Line)
		}
	}
	if sub != nil {
		t.descriptors(domain, sub, p)
	}
}

func (t *translator) rateLimit(domain string, n *yaml.Node, path []rules.Entry, shadow bool, line int) {
	if n.Kind != yaml.MappingNode {
		t.fail(n, "rate_limit must be a mapping (unit, requests_per_unit)")
		return
	}
	var (
		name, unit        string
		rpu, mult         int64 = -1, 1
		unlimited         bool
		replaces          []string
		unitNode, rpuNode *yaml.Node
		ok                = true
	)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			name = v.Value
		case "unit":
			unitNode, unit = v, strings.ToLower(v.Value)
		case "requests_per_unit":
			rpuNode = v
			if v.Decode(&rpu) != nil || rpu < 0 {
				t.fail(v, "requests_per_unit must be a whole number >= 0")
				ok = false
			}
		case "unit_multiplier":
			if v.Decode(&mult) != nil || mult < 1 {
				t.fail(v, "unit_multiplier must be a whole number >= 1")
				ok = false
			}
		case "unlimited":
			if v.Decode(&unlimited) != nil {
				t.fail(v, "unlimited must be true or false")
				ok = false
			}
		case "replaces":
			if v.Kind != yaml.SequenceNode {
				t.fail(v, "replaces must be a list of {name: ...}")
				ok = false
				continue
			}
			for _, r := range v.Content {
				var rn struct {
					Name string `yaml:"name"`
				}
				if r.Decode(&rn) != nil || rn.Name == "" {
					t.fail(r, "each replaces entry needs a name")
					ok = false
					continue
				}
				replaces = append(replaces, rn.Name)
			}
		default:
			t.fail(k, "unknown rate_limit field %q (want name, replaces, unit, requests_per_unit, unit_multiplier, unlimited)", k.Value)
			ok = false
		}
	}
	if !ok {
		return
	}
	if unlimited {
		t.add(domain, path, rules.Rule{Unlimited: true, Shadow: shadow}, name, replaces, line)
		return
	}
	d, known := units[unit]
	switch {
	case unitNode == nil:
		t.fail(n, "rate_limit needs a unit (second, minute, hour, day)")
		return
	case !known:
		t.fail(unitNode, "unit %q: Weir translates second, minute, hour, day and week (calendar months and years have no fixed length)", unitNode.Value)
		return
	case rpuNode == nil:
		t.fail(n, "rate_limit needs requests_per_unit")
		return
	case rpu == 0:
		t.fail(rpuNode, "requests_per_unit 0 blocks every request; Weir rules need a rate > 0: block the key with an override instead (weir overrides set --block)")
		return
	}
	t.add(domain, path, rules.Rule{Algorithm: t.opts.Algorithm, Rate: rpu, Period: rules.Duration(d * time.Duration(mult)), Shadow: shadow},
		name, replaces, line)
}

// add records a rule for path, naming it.
func (t *translator) add(domain string, path []rules.Entry, r rules.Rule, name string, replaces []string, line int) {
	r.Match = rules.Match{Domain: domain, Descriptor: path}
	r.Key = rules.KeyDescriptor
	r.ID = t.id(domain, path, name)
	if name != "" {
		t.names[name] = append(t.names[name], len(t.rules))
	}
	t.rules = append(t.rules, r)
	t.pend = append(t.pend, pending{file: t.fileName, line: line, replaces: replaces})
}

// id is name when it is a usable, unused rule id, else one made from the
// domain and path; a clash gets "-2", "-3"...
func (t *translator) id(domain string, path []rules.Entry, name string) string {
	base := name
	if base == "" || sanitize(base) != base {
		var b strings.Builder
		b.WriteString(domain)
		for _, e := range path {
			b.WriteByte('.')
			b.WriteString(e.Key)
			if e.Value != "" {
				b.WriteByte('_')
				b.WriteString(strings.ReplaceAll(e.Value, "*", "any"))
			}
		}
		base = sanitize(b.String())
	}
	if len(base) > rules.MaxIDLen-4 {
		base = base[:rules.MaxIDLen-4]
	}
	id := base
	for i := 2; t.ids[id] || id == rules.ReservedID; i++ {
		id = base + "-" + strconv.Itoa(i)
	}
	t.ids[id] = true
	return id
}

// sanitize keeps letters, digits and . _ : - and writes "_" for the rest.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// resolveReplaces turns replaced names into the ids of the rules named so
// (in the same domain).
func (t *translator) resolveReplaces() {
	for i := range t.rules {
		p := t.pend[i]
		for _, name := range p.replaces {
			idxs := t.names[name]
			found := false
			for _, j := range idxs {
				if t.rules[j].Match.Domain == t.rules[i].Match.Domain && j != i {
					t.rules[i].Replaces = append(t.rules[i].Replaces, t.rules[j].ID)
					found = true
				}
			}
			if !found {
				t.problems = append(t.problems, Problem{File: p.file, Line: p.line,
					Msg: fmt.Sprintf("replaces %q: no other rate_limit of this domain has that name", name)})
			}
		}
	}
}
