package rules

import (
	"os"
	"strings"
	"testing"

	"github.com/weirlimit/weir/bucket"
)

// docRows reads the tables of docs/rules.md: for each "## " section the
// rows whose first cell is `code`, split into cells with backticks and
// escaped pipes undone.
func docRows(text string) map[string][][]string {
	out := map[string][][]string{}
	section := ""
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
			continue
		}
		if strings.HasPrefix(line, "| `") {
			out[section] = append(out[section], splitRow(line))
		}
	}
	return out
}

// splitRow splits a markdown table row on the pipes that are not escaped.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, cell.String())
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	cells = append(cells, cell.String())
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "`", "")
	}
	return cells
}

// docs/rules.md documents every field of the parser's tables, no other,
// each with the table's type and default; and every key type and
// algorithm.
func TestRulesDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docRows(string(b))
	for _, c := range []struct {
		section string
		fields  []Field
	}{
		{"The file", FileFields()},
		{"Rule fields", RuleFields()},
		{"Override fields", OverrideFields()},
	} {
		var table []Field
		for _, r := range rows[c.section] {
			if len(r) != 4 {
				t.Errorf("docs/rules.md, %q: want 4 cells (field, type, default, meaning), got %q", c.section, r)
				continue
			}
			table = append(table, Field{Name: r[0], Type: r[1], Default: r[2]})
		}
		if len(table) == 0 {
			t.Errorf("docs/rules.md: no field table under \"## %s\"", c.section)
		}
		documented := map[string]Field{}
		for _, f := range table {
			if _, dup := documented[f.Name]; dup {
				t.Errorf("docs/rules.md, %q: %s documented twice", c.section, f.Name)
			}
			documented[f.Name] = f
		}
		known := map[string]bool{}
		for _, f := range c.fields {
			known[f.Name] = true
			d, ok := documented[f.Name]
			switch {
			case !ok:
				t.Errorf("docs/rules.md, %q: field %s is missing (type %q, default %q)", c.section, f.Name, f.Type, f.Default)
			case d.Type != f.Type || d.Default != f.Default:
				t.Errorf("docs/rules.md, %q: %s has type %q, default %q; the parser's table says %q, %q",
					c.section, f.Name, d.Type, d.Default, f.Type, f.Default)
			}
		}
		for _, f := range table {
			if !known[f.Name] {
				t.Errorf("docs/rules.md, %q: %s is documented but the parser does not know it", c.section, f.Name)
			}
		}
	}
	keys := map[string]bool{}
	for _, r := range rows["Keys, and a missing value"] {
		keys[r[0]] = true
	}
	for _, k := range []string{KeyAPIKey, KeyUser, KeyIP, KeyGlobal, KeyHeaderPrefix + "<Name>", KeyDescriptor} {
		if !keys[k] {
			t.Errorf("docs/rules.md, \"Keys, and a missing value\": %s is missing", k)
		}
	}
	algs := map[string]bool{}
	for _, a := range Algorithms() {
		algs[a.Name] = true
	}
	for a := bucket.Algorithm(0); ; a++ {
		name := a.String()
		if strings.HasPrefix(name, "algorithm(") {
			break
		}
		if !algs[name] {
			t.Errorf("rules.Algorithms: %s is missing", name)
		}
	}
	for _, a := range Algorithms() {
		name := a.Name
		found := false
		for _, r := range rows["Algorithms"] {
			found = found || r[0] == name || strings.HasPrefix(r[0], name+" ")
		}
		if !found {
			t.Errorf("docs/rules.md, \"Algorithms\": %s is missing", name)
		}
	}
}
