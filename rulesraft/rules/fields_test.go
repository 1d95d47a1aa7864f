package rules

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// tagPaths lists the yaml field paths of struct type t as the field tables
// write them: a nested struct's fields follow it ("match.route"), a list of
// structs adds "[]" ("match.descriptor[].key"). Types with their own YAML
// form (Duration, Lease, time.Time) are leaves.
func tagPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		out = append(out, path)
		ft := f.Type
		sub := path + "."
		if ft.Kind() == reflect.Slice {
			ft, sub = ft.Elem(), path+"[]."
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() && ft != reflect.TypeFor[Rule]() {
			out = append(out, tagPaths(ft, sub)...)
		}
	}
	return out
}

func names(fs []Field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// The tables hold exactly the fields the structs decode, in struct order.
func TestFieldTablesMatchStructTags(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields []Field
		typ    reflect.Type
	}{
		{"FileFields", FileFields(), reflect.TypeFor[File]()},
		{"RuleFields", RuleFields(), reflect.TypeFor[Rule]()},
		{"OverrideFields", OverrideFields(), reflect.TypeFor[Override]()},
	} {
		want := tagPaths(c.typ, "")
		if got := names(c.fields); !slices.Equal(got, want) {
			t.Errorf("%s = %v\nstruct %v has yaml fields %v", c.name, got, c.typ, want)
		}
		for _, f := range c.fields {
			if f.Type == "" || f.Default == "" {
				t.Errorf("%s: %q has no type or no default (use Required or Unset)", c.name, f.Name)
			}
		}
	}
}

// setPath sets the field at path in a rule written as a YAML mapping,
// creating the mappings and one-item lists on the way.
func setPath(m map[string]any, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		m[head] = v
		return
	}
	if list, ok := strings.CutSuffix(head, "[]"); ok {
		item := map[string]any{}
		m[list] = []any{item}
		setPath(item, rest, v)
		return
	}
	sub, ok := m[head].(map[string]any)
	if !ok {
		sub = map[string]any{}
		m[head] = sub
	}
	setPath(sub, rest, v)
}

// The parser takes every field of the table (it may refuse the value, not
// the name) and names them all when it refuses an unknown one.
func TestParserTakesEveryRuleField(t *testing.T) {
	for _, f := range RuleFields() {
		rule := map[string]any{"id": "a", "match": map[string]any{"route": "/x"}, "key": "ip", "rate": 1, "period": "1s"}
		setPath(rule, f.Name, nil)
		src, err := yaml.Marshal(map[string]any{"rules": []any{rule}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseFile(src)
		if err != nil && strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: the parser does not know it:\n%s\n%v", f.Name, src, err)
		}
	}
	for _, c := range []struct{ parent, want string }{
		{"", "id, match, key, algorithm"},
		{"match", "route, method, plan, domain, descriptor"},
		{"events", "sample, redact"},
		{"match.descriptor[]", "key, value"},
	} {
		rule := map[string]any{"id": "a", "match": map[string]any{"route": "/x"}, "key": "ip", "rate": 1, "period": "1s"}
		field := strings.TrimPrefix(c.parent+".colour", ".")
		setPath(rule, field, "red")
		src, _ := yaml.Marshal(map[string]any{"rules": []any{rule}})
		_, err := ParseFile(src)
		msg := "unknown field (want " + fieldNames(RuleFields(), c.parent) + ")"
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(msg, c.want) {
			t.Errorf("%s: got %v, want %q listing %s", field, err, msg, c.want)
		}
	}
}

// Normalize writes out the defaults the table gives: a minimal rule,
// normalized and written back, holds the table's default for every field
// it did not set and Normalize filled in.
func TestNormalizeWritesTheTableDefaults(t *testing.T) {
	min := Rule{ID: "a", Match: Match{Route: "/x"}, Key: KeyIP, Rate: 7, Period: Duration(time.Second)}
	out, err := yaml.Marshal(Normalize(min))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	filled := 0
	for _, f := range RuleFields() {
		head, rest, nested := strings.Cut(f.Name, ".")
		v, ok := m[head]
		if nested {
			sub, _ := v.(map[string]any)
			v, ok = sub[rest]
		}
		if !ok || slices.Contains([]string{"id", "match", "match.route", "key", "rate", "period"}, f.Name) {
			continue
		}
		filled++
		want := f.Default
		if f.Name == "burst" {
			want = "7" // "= rate"
		}
		if got := yamlScalar(v); got != want {
			t.Errorf("Normalize sets %s to %q; the table's default is %q", f.Name, got, want)
		}
	}
	if filled < 5 { // algorithm, method, plan, fail_mode, timeout, burst
		t.Errorf("only %d defaults written out by Normalize:\n%s", filled, out)
	}
}

func yamlScalar(v any) string {
	b, _ := yaml.Marshal(v)
	return strings.Trim(strings.TrimSpace(string(b)), `"'`)
}
