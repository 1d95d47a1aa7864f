package rules

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseFile reads a rules file (YAML; JSON is accepted as the YAML subset
// it is), validates it and returns its rules normalized (see Normalize), in
// file order.
//
// Parsing is strict: an unknown or repeated field is an error, and so is a
// second YAML document (after "---"; a leading "---" is fine). The file is
// taken or refused as a whole: on any problem ParseFile returns no rules and
// a *ValidationError listing every problem found, each with its line and
// field ("line 7: rules[1].rate: must be > 0"), sorted by line.
//
// The file is walked as a yaml.Node tree rather than decoded with
// yaml.Decoder.KnownFields(true), which stops at the first unknown field;
// the walk finds them all and keeps each field's line for validation.
func ParseFile(data []byte) ([]Rule, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, &ValidationError{Problems: []Problem{syntaxProblem(err)}}
	}
	p := &fileParser{}
	rs := p.file(&doc)
	// One document per file: a second one ("---") used to be dropped
	// without a word, and with it every rule it held.
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		p.list = append(p.list, syntaxProblem(err))
	default:
		p.add(&next, "", "a second YAML document starts here (\"---\"); a rules file holds one document: put every rule in one \"rules:\" list")
	}
	if len(p.list) > 0 {
		sort.SliceStable(p.list, func(i, j int) bool { return p.list[i].Line < p.list[j].Line })
		return nil, &ValidationError{Problems: p.list}
	}
	for i := range rs {
		rs[i] = Normalize(rs[i])
	}
	return rs, nil
}

// syntaxProblem turns a yaml.v3 syntax error ("yaml: line 3: ...") into a
// Problem with that line.
func syntaxProblem(err error) Problem {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "yaml: line ")
	if !ok {
		return Problem{Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	num, text, ok := strings.Cut(rest, ": ")
	line, convErr := strconv.Atoi(num)
	if !ok || convErr != nil {
		return Problem{Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	return Problem{Line: line, Msg: "not valid YAML: " + text}
}

type fileParser struct {
	list []Problem
}

func (p *fileParser) add(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.list = append(p.list, Problem{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (p *fileParser) file(doc *yaml.Node) []Rule {
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.add(nil, "", "file is empty; want a top-level \"rules:\" list")
		return nil
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		p.add(root, "", "the top level must be a mapping holding a \"rules:\" list")
		return nil
	}
	var rulesNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := resolve(root.Content[i]), resolve(root.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			p.add(k, "", "field names must be plain strings")
		case k.Value != "rules":
			p.add(k, k.Value, "unknown field (the top level holds only \"rules\")")
		case rulesNode != nil:
			p.add(k, "rules", "appears twice (first at line %d)", rulesNode.Line)
		default:
			rulesNode = v
		}
	}
	if rulesNode == nil {
		p.add(root, "rules", "missing")
		return nil
	}
	if isNull(rulesNode) {
		return []Rule{}
	}
	if rulesNode.Kind != yaml.SequenceNode {
		p.add(rulesNode, "rules", "must be a list of rules")
		return nil
	}
	rs := make([]Rule, 0, len(rulesNode.Content))
	type first struct{ index, line int }
	seen := make(map[string]first, len(rulesNode.Content))
	for i, item := range rulesNode.Content {
		r, lines, bad := p.rule(resolve(item), i)
		rs = append(rs, r)
		if bad == nil { // not a mapping
			continue
		}
		prefix := indexPrefix(i)
		var ps problems
		r.check(&ps)
		for _, pr := range ps.list {
			parent, _, _ := strings.Cut(pr.Field, ".")
			if bad[pr.Field] || bad[parent] || (pr.Field == "lease" && bad["burst"]) {
				continue // already reported as undecodable
			}
			line, ok := lines[pr.Field]
			if !ok {
				line, ok = lines[parent]
			}
			if !ok {
				line = lines[""]
			}
			field := prefix + pr.Field
			if pr.Field == "" {
				field = strings.TrimSuffix(prefix, ".")
			}
			p.list = append(p.list, Problem{Line: line, Field: field, Msg: pr.Msg})
		}
		if r.ID == "" || bad["id"] {
			continue
		}
		if f, dup := seen[r.ID]; dup {
			p.list = append(p.list, Problem{Line: lines["id"], Field: prefix + "id",
				Msg: fmt.Sprintf("duplicate id %q (first used by rules[%d] at line %d)", r.ID, f.index, f.line)})
			continue
		}
		seen[r.ID] = first{i, lines["id"]}
	}
	return rs
}

// rule decodes one rule mapping. lines maps a field ("rate", "match.route";
// "" for the rule itself) to its line; bad holds the fields that could not
// be decoded. bad is nil when n is not a mapping at all.
func (p *fileParser) rule(n *yaml.Node, i int) (r Rule, lines map[string]int, bad map[string]bool) {
	prefix := indexPrefix(i)
	if n.Kind != yaml.MappingNode {
		p.add(n, strings.TrimSuffix(prefix, "."), "must be a mapping (id: ..., match: ..., key: ...)")
		return r, nil, nil
	}
	lines = map[string]int{"": n.Line}
	bad = map[string]bool{}
	d := fieldDecoder{p: p, prefix: prefix, lines: lines, bad: bad}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := resolve(n.Content[j]), resolve(n.Content[j+1])
		if k.Kind != yaml.ScalarNode {
			p.add(k, strings.TrimSuffix(prefix, "."), "field names must be plain strings")
			continue
		}
		name := k.Value
		if first, dup := lines[name]; dup && name != "" {
			p.add(k, prefix+name, "appears twice (first at line %d)", first)
			bad[name] = true
			continue
		}
		lines[name] = v.Line
		switch name {
		case "id":
			d.str(v, name, &r.ID)
		case "match":
			d.match(v, &r.Match)
		case "key":
			d.str(v, name, &r.Key)
		case "algorithm":
			d.str(v, name, &r.Algorithm)
		case "rate":
			d.int(v, name, &r.Rate)
		case "period":
			d.dur(v, name, &r.Period)
		case "calendar":
			d.str(v, name, &r.Calendar)
		case "timezone":
			d.str(v, name, &r.Timezone)
		case "burst":
			d.int(v, name, &r.Burst)
		case "fail_mode":
			d.str(v, name, &r.FailMode)
		case "timeout":
			d.dur(v, name, &r.Timeout)
		case "shadow":
			d.bool(v, name, &r.Shadow)
		case "lease":
			d.lease(v, name, &r.Lease)
		case "max_keys":
			d.int(v, name, &r.MaxKeys)
		case "cost":
			d.int(v, name, &r.Cost)
		case "cost_header":
			d.str(v, name, &r.CostHeader)
		case "scope":
			d.str(v, name, &r.Scope)
		case "events":
			d.events(v, &r.Events)
		case "replaces":
			d.strs(v, name, &r.Replaces)
		case "unlimited":
			d.bool(v, name, &r.Unlimited)
		case "durable":
			d.str(v, name, &r.Durable)
		case "limit":
			d.int(v, name, &r.Concurrency)
		case "permit_ttl":
			d.dur(v, name, &r.PermitTTL)
		case "priority_header":
			d.str(v, name, &r.PriorityHeader)
		case "priority_default":
			d.str(v, name, &r.PriorityDefault)
		case "reserve":
			d.reserve(v, name, &r.Reserve)
		default:
			delete(lines, name)
			p.add(k, prefix+name, "unknown field (want %s)", fieldNames(RuleFields(), ""))
		}
	}
	return r, lines, bad
}

type fieldDecoder struct {
	p      *fileParser
	prefix string
	lines  map[string]int
	bad    map[string]bool
}

func (d fieldDecoder) fail(n *yaml.Node, field, format string, args ...any) {
	d.bad[field] = true
	d.p.add(n, d.prefix+field, format, args...)
}

func (d fieldDecoder) str(n *yaml.Node, field string, dst *string) {
	switch {
	case isNull(n):
	case n.Kind != yaml.ScalarNode:
		d.fail(n, field, "must be a string")
	default:
		*dst = n.Value
	}
}

func (d fieldDecoder) int(n *yaml.Node, field string, dst *int64) {
	if isNull(n) {
		return
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.fail(n, field, "must be a whole number, got %s", describe(n))
		return
	}
	*dst = v
}

func (d fieldDecoder) lease(n *yaml.Node, field string, dst *Lease) {
	if isNull(n) {
		return
	}
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!str") {
		d.fail(n, field, "%s, got %s", errLeaseValue, describe(n))
		return
	}
	v, err := ParseLease(n.Value)
	if err != nil || (tag == "!!str" && n.Value == "") {
		d.fail(n, field, "%s, got %s", errLeaseValue, describe(n))
		return
	}
	*dst = v
}

func (d fieldDecoder) bool(n *yaml.Node, field string, dst *bool) {
	if isNull(n) {
		return
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.fail(n, field, "must be true or false, got %s", describe(n))
		return
	}
	*dst = v
}

func (d fieldDecoder) dur(n *yaml.Node, field string, dst *Duration) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, field, "must be a duration such as 1s, 30s, 5m, 1h, got %s", describe(n))
		return
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.fail(n, field, "invalid duration %q (use a Go duration such as 1s, 30s, 5m, 1h, 24h)", n.Value)
		return
	}
	*dst = Duration(v)
}

func (d fieldDecoder) match(n *yaml.Node, dst *Match) {
	d.fields(n, "match", "{route: /v1/orders, method: POST}", fieldNames(RuleFields(), "match"), func(name, field string, v *yaml.Node) bool {
		switch name {
		case "route":
			d.str(v, field, &dst.Route)
		case "method":
			d.str(v, field, &dst.Method)
		case "plan":
			d.str(v, field, &dst.Plan)
		case "domain":
			d.str(v, field, &dst.Domain)
		case "descriptor":
			d.entries(v, field, &dst.Descriptor)
		default:
			return false
		}
		return true
	})
}

// events reads a rule's events option: {sample: 0.01, redact: true}.
func (d fieldDecoder) events(n *yaml.Node, dst *Events) {
	d.fields(n, "events", "{sample: 0.01, redact: true}", fieldNames(RuleFields(), "events"), func(name, field string, v *yaml.Node) bool {
		switch name {
		case "sample":
			if isNull(v) {
				return true
			}
			var f float64
			if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") || v.Decode(&f) != nil {
				d.fail(v, field, "must be a number from 0 to 1, got %s", describe(v))
				return true
			}
			dst.Sample = f
		case "redact":
			d.bool(v, field, &dst.Redact)
		default:
			return false
		}
		return true
	})
}

// fields walks the mapping n of the rule's field name (e.g. {sample: 0.01}
// is example): each field once, decoded by one; a field one does not
// know (false) is reported with the fields it takes (want).
func (d fieldDecoder) fields(n *yaml.Node, name, example, want string, one func(name, field string, v *yaml.Node) bool) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, name, "must be a mapping such as %s", example)
		return
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := resolve(n.Content[j]), resolve(n.Content[j+1])
		if k.Kind != yaml.ScalarNode {
			d.fail(k, name, "field names must be plain strings")
			continue
		}
		field := name + "." + k.Value
		if first, dup := d.lines[field]; dup {
			d.fail(k, field, "appears twice (first at line %d)", first)
			continue
		}
		d.lines[field] = v.Line
		if !one(k.Value, field, v) {
			delete(d.lines, field)
			d.bad[field] = true
			d.p.add(k, d.prefix+field, "unknown field (want %s)", want)
		}
	}
}

// strs decodes a list of strings.
func (d fieldDecoder) strs(n *yaml.Node, field string, dst *[]string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "must be a list of rule ids, got %s", describe(n))
		return
	}
	for _, c := range n.Content {
		c = resolve(c)
		if c.Kind != yaml.ScalarNode {
			d.fail(c, field, "must be a list of rule ids, got %s in it", describe(c))
			return
		}
		*dst = append(*dst, c.Value)
	}
}

// entries decodes a descriptor pattern: a list of {key, value}.
func (d fieldDecoder) entries(n *yaml.Node, field string, dst *[]Entry) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "must be a list such as [{key: path, value: /v1/*}], got %s", describe(n))
		return
	}
	for i, c := range n.Content {
		c = resolve(c)
		f := field + "[" + strconv.Itoa(i) + "]"
		if c.Kind != yaml.MappingNode {
			d.fail(c, f, "must be a mapping {key: ..., value: ...}, got %s", describe(c))
			continue
		}
		var e Entry
		for j := 0; j+1 < len(c.Content); j += 2 {
			k, v := resolve(c.Content[j]), resolve(c.Content[j+1])
			switch k.Value {
			case "key":
				d.str(v, f+".key", &e.Key)
			case "value":
				d.str(v, f+".value", &e.Value)
			default:
				d.fail(k, f+"."+k.Value, "unknown field (want %s)", fieldNames(RuleFields(), "match.descriptor[]"))
			}
		}
		*dst = append(*dst, e)
	}
}

// describe names a node's value for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return strconv.Quote(v)
}

// MarshalFile writes rules as a rules.yaml file that ParseFile reads back
// to the same rules (normalized). The rules are validated first; fields at
// their zero value are left out.
func MarshalFile(rs []Rule) ([]byte, error) {
	if err := Validate(rs); err != nil {
		return nil, err
	}
	if rs == nil {
		rs = []Rule{}
	}
	var buf bytes.Buffer
	buf.WriteString("# Weir rules file. Apply with: weir rules apply -f rules.yaml\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(File{Rules: rs}); err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// reserve decodes a reserve: a mapping of class to percent ("20%" or 20).
func (d fieldDecoder) reserve(n *yaml.Node, field string, dst *Reserves) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "must be a mapping of class to percent such as {critical: 20%%}, got %s", describe(n))
		return
	}
	out := Reserves{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := resolve(n.Content[j]), resolve(n.Content[j+1])
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			d.fail(k, field, "must be a mapping of class to percent such as {critical: 20%%}")
			return
		}
		if _, dup := out[k.Value]; dup {
			d.fail(k, field, "class %q appears twice", k.Value)
			return
		}
		s, err := ParseShare(v.Value)
		if err != nil {
			d.fail(v, field, "%s: %v", k.Value, err)
			return
		}
		out[k.Value] = s
	}
	*dst = out
}
