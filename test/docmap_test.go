package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/design.md's "## Map" names every package of the module. The map is
// where a newcomer starts, and it drifted before (node/rls, node/forwardauth
// and three more were missing). TestDesignMapListsEveryPackage holds it
// equal to the tree both ways: a package of the tree that no row names, and
// a row that names a package not in the tree, both fail.
//
// A row may name a package that is about to land (issue 31's split of
// node) when its first cell says "not in the tree yet"; such a row fails
// once the package exists, so the mark cannot outlive the move.

// notYet marks a map row whose packages do not exist yet.
const notYet = "not in the tree yet"

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	mapHeading = regexp.MustCompile(`^## Map\s*$`)
)

// modulePackages returns the module-relative directories under root that
// hold .go files: every package of the module. testdata, hidden and
// underscore directories are not packages; a directory with its own go.mod
// (deploy/helm/rendertest, the Helm render test) is another module.
func modulePackages(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	pkgs := make([]string, 0, len(seen))
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs, err
}

// mapRows reads the package table under design.md's "## Map": for each row,
// the packages its first cell names (in backticks) and whether the row is
// marked notYet. It stops at the table's end.
func mapRows(text string) (listed map[string]int, pending map[string]int, err string) {
	listed, pending = map[string]int{}, map[string]int{}
	lines := strings.Split(text, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return mapHeading.MatchString(l) })
	if start < 0 {
		return nil, nil, `docs/design.md has no "## Map" section`
	}
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "#") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(l, "|"), "|")
		first := cells[0]
		if strings.TrimSpace(first) == "package" || strings.Trim(first, " -:") == "" {
			continue // header, separator
		}
		into := listed
		if strings.Contains(first, notYet) {
			into = pending
		}
		names := backticked.FindAllStringSubmatch(first, -1)
		if len(names) == 0 {
			return nil, nil, "docs/design.md:" + itoa(i+1) + ": a map row names no package in backticks: " + l
		}
		for _, m := range names {
			into[m[1]] = i + 1
		}
	}
	if len(listed) == 0 {
		return nil, nil, `docs/design.md's "## Map" has no package table`
	}
	return listed, pending, ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// mapProblems compares the map with the tree's packages and says what is
// wrong, one line each, sorted.
func mapProblems(tree []string, listed, pending map[string]int) []string {
	var out []string
	in := map[string]bool{}
	for _, p := range tree {
		in[p] = true
		if _, ok := listed[p]; !ok {
			if line, ok := pending[p]; ok {
				out = append(out, "docs/design.md:"+itoa(line)+": `"+p+"` is in the tree now: drop its \""+notYet+"\" mark")
			} else {
				out = append(out, "`"+p+"` is a package of the tree and has no row in docs/design.md's map")
			}
		}
	}
	for p, line := range listed {
		if !in[p] {
			out = append(out, "docs/design.md:"+itoa(line)+": the map names `"+p+"`, which is not a package of the tree (renamed or removed? or mark it \""+notYet+"\")")
		}
	}
	slices.Sort(out)
	return out
}

func TestDesignMapListsEveryPackage(t *testing.T) {
	tree, err := modulePackages(docsRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tree, "node") || !slices.Contains(tree, "bucket") || slices.Contains(tree, "deploy/helm/rendertest") {
		t.Fatalf("the package walk is broken: %v", tree)
	}
	listed, pending, bad := mapRows(readDoc(t, filepath.Join(docsRoot, "docs", "design.md")))
	if bad != "" {
		t.Fatal(bad)
	}
	for _, p := range mapProblems(tree, listed, pending) {
		t.Error(p)
	}
}

// TestDesignMapCheckFails: the comparison on a made-up map and tree, so a
// check that can never fail is caught.
func TestDesignMapCheckFails(t *testing.T) {
	doc := "# x\n\n## Map\n\ntext\n\n| package | owns |\n|---|---|\n" +
		"| `a` | x |\n| `b`, `b/c` | y |\n| `gone` | z |\n| `next` (" + notYet + ") | w |\n| `landed` (" + notYet + ") | v |\n\n| `after` | not the map |\n"
	listed, pending, bad := mapRows(doc)
	if bad != "" {
		t.Fatal(bad)
	}
	got := mapProblems([]string{"a", "b", "b/c", "landed", "missing"}, listed, pending)
	want := []string{
		"`missing` is a package of the tree and has no row in docs/design.md's map",
		"docs/design.md:11: the map names `gone`, which is not a package of the tree (renamed or removed? or mark it \"" + notYet + "\")",
		"docs/design.md:13: `landed` is in the tree now: drop its \"" + notYet + "\" mark",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if _, _, bad := mapRows("# x\n\n## Other\n"); bad == "" {
		t.Error("a design.md without a map must fail")
	}
	if _, _, bad := mapRows("## Map\n\n| package | owns |\n|---|---|\n| node | no backticks |\n"); bad == "" {
		t.Error("a row naming no package in backticks must fail")
	}

	dir := t.TempDir()
	for _, f := range []string{"a/a.go", "a/testdata/t/t.go", "b/c/c.go", "mod/go.mod", "mod/m.go", ".hidden/h.go", "docs/x.md"} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := modulePackages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tree, []string{"a", "b/c"}) {
		t.Errorf("packages of the made-up tree: %v, want [a b/c] (no testdata, nested module or hidden dir)", tree)
	}
}
