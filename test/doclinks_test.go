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

// docFiles returns docs/*.md and README.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(docsRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, filepath.Join(docsRoot, "README.md"))
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
	files := docFiles(t)
	checked := 0
	for _, f := range files {
		rel, _ := filepath.Rel(docsRoot, f)
		for i, line := range proseLines(readDoc(t, f)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.HasPrefix(target, "file:") {
					t.Errorf("%s: link %q (line %d): a file URL points outside the repository", rel, target, i+1)
					continue
				}
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					if where := outside(f, path); where != "" {
						t.Errorf("%s: link %q (line %d): %s", rel, target, i+1, where)
						continue
					}
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

// outside explains why a relative link's path from the markdown file doc
// leaves the repository (an absolute path, or one that climbs above the
// root with ".."), or returns "". A reader of a clone has nothing there.
func outside(doc, path string) string {
	if filepath.IsAbs(path) || strings.HasPrefix(path, "/") {
		return "an absolute path points outside the repository (link relative to the file)"
	}
	root, err := filepath.Abs(docsRoot)
	if err != nil {
		return err.Error()
	}
	dest, err := filepath.Abs(filepath.Join(filepath.Dir(doc), path))
	if err != nil {
		return err.Error()
	}
	if r, err := filepath.Rel(root, dest); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "points outside the repository"
	}
	return ""
}

// mdName is a mention of a markdown file in prose or code: a path ending
// in .md, starting a word (so not the tail of a URL).
var mdName = regexp.MustCompile(`(?:^|[\s(\[\x60'"])([A-Za-z0-9_.][A-Za-z0-9_./-]*\.md)\b`)

// TestDocsNameOnlyRepositoryFiles: every markdown file README.md and
// docs/*.md name, linked or not (in prose or in a code span: "the
// contract is `shared/DESIGN.md`"), is a file of the repository, found
// from the naming file's directory, from the root or from docs/. A reader
// of a clone cannot open a document that lives elsewhere.
func TestDocsNameOnlyRepositoryFiles(t *testing.T) {
	files := docFiles(t)
	named := 0
	for _, f := range files {
		rel, _ := filepath.Rel(docsRoot, f)
		for i, line := range strings.Split(readDoc(t, f), "\n") {
			for _, m := range mdName.FindAllStringSubmatch(line, -1) {
				name := m[1]
				named++
				found := false
				for _, dir := range []string{filepath.Dir(f), docsRoot, filepath.Join(docsRoot, "docs")} {
					if outside(filepath.Join(dir, "x.md"), name) != "" {
						continue
					}
					if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("%s:%d: names %q, which is not a file of the repository", rel, i+1, name)
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no markdown file named in the docs: the pattern is broken")
	}
}

// TestDocLinkOutside: the outside check itself, on made-up paths.
func TestDocLinkOutside(t *testing.T) {
	doc := filepath.Join(docsRoot, "docs", "design.md")
	for path, bad := range map[string]bool{
		"operations.md":              false,
		"../README.md":               false,
		"../deploy/nginx/weir.conf":  false,
		"../../shared/DESIGN.md":     true,
		"../../../etc/passwd":        true,
		"/work/shared/DESIGN.md":     true,
		"../docs/../../x.md":         true,
		"./../node/../docs/rules.md": false,
	} {
		if got := outside(doc, path) != ""; got != bad {
			t.Errorf("outside(%s, %q) = %v, want %v", doc, path, got, bad)
		}
	}
	if m := mdName.FindAllStringSubmatch("the contract is \x60shared/DESIGN.md\x60 and docs/rules.md.", -1); len(m) != 2 || m[0][1] != "shared/DESIGN.md" || m[1][1] != "docs/rules.md" {
		t.Errorf("mdName found %q, want shared/DESIGN.md and docs/rules.md", m)
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
