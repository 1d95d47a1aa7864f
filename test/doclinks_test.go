package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The docs link to each other, to files of the repository and to
// headings; a renamed file or heading breaks them silently. These tests
// resolve every relative link of README.md and docs/*.md, and keep
// docs/benchmarks.md's contents list whole and newest first.

// docsRoot is the repository, from this package's directory.
const docsRoot = ".."

var (
	mdLink      = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan    = regexp.MustCompile("`[^`]*`")
	mdHeading   = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	notAnchor   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	headingWhen = regexp.MustCompile(`\((\d{4}-\d{2}-\d{2})(?:, (\d{2}:\d{2}))?`)
)

// proseLines returns the lines of a markdown file with fenced code blocks
// blanked and inline code spans removed (line numbers stay).
func proseLines(text string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		if fence {
			fenced = !fenced
		}
		if fence || fenced {
			l = ""
		}
		out = append(out, codeSpan.ReplaceAllString(l, ""))
	}
	return out
}

// headings returns the markdown file's headings (level, text) outside code.
func headings(text string) (levels []int, titles []string) {
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if m := mdHeading.FindStringSubmatch(l); m != nil && !fenced {
			levels, titles = append(levels, len(m[1])), append(titles, m[2])
		}
	}
	return levels, titles
}

// anchors returns the ids GitHub gives the file's headings: lower case,
// punctuation dropped, spaces to hyphens, "-1", "-2" after repeats.
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	_, titles := headings(text)
	for _, t := range titles {
		t = strings.ReplaceAll(t, "`", "")
		t = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(t, "$1") // a link's text
		id := strings.ReplaceAll(notAnchor.ReplaceAllString(strings.ToLower(strings.TrimSpace(t)), ""), " ", "-")
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocLinksResolve: every relative link in README.md and docs/*.md
// names a file or directory of the repository, and a #anchor names a
// heading of the markdown file it points at.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(docsRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(docsRoot, "README.md"))
	checked := 0
	for _, f := range files {
		rel, _ := filepath.Rel(docsRoot, f)
		for i, line := range proseLines(readDoc(t, f)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.Join(filepath.Dir(f), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: link %q (line %d): no such file", rel, target, i+1)
						continue
					}
				}
				checked++
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchors(readDoc(t, dest))[anchor] {
					t.Errorf("%s: link %q (line %d): %s has no heading with that anchor", rel, target, i+1, filepath.Base(dest))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
}

// TestBenchmarksContents: docs/benchmarks.md's "## Contents" links every
// section (## heading) in the file's order, and the dated sections run
// newest first (a new one goes at the top, with a line in the list).
func TestBenchmarksContents(t *testing.T) {
	text := readDoc(t, filepath.Join(docsRoot, "docs", "benchmarks.md"))
	levels, titles := headings(text)
	var sections []string
	for i, l := range levels {
		if l == 2 && titles[i] != "Contents" {
			sections = append(sections, titles[i])
		}
	}
	_, rest, ok := strings.Cut(text, "\n## Contents\n")
	if !ok {
		t.Fatal(`docs/benchmarks.md has no "## Contents" section`)
	}
	list, _, _ := strings.Cut(rest, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^- \[[^\]]*\]\(#([^)]+)\)`).FindAllStringSubmatch(list, -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for _, s := range sections {
		for id := range anchors("## " + s) {
			want = append(want, id)
		}
	}
	if strings.Join(listed, "\n") != strings.Join(want, "\n") {
		t.Errorf("the contents list links\n  %s\nthe sections are, in order\n  %s", strings.Join(listed, "\n  "), strings.Join(want, "\n  "))
	}
	prevDate, prevTime, prevTitle := "", "", ""
	for _, s := range sections {
		m := headingWhen.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		if prevDate != "" && (m[1] > prevDate || m[1] == prevDate && m[2] != "" && prevTime != "" && m[2] > prevTime) {
			t.Errorf("%q comes after %q, which is older: newest first", s, prevTitle)
		}
		prevDate, prevTime, prevTitle = m[1], m[2], s
	}
}
