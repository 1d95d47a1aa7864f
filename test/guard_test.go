package test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// guarded lists the directories (module-relative, each with everything
// under it) whose non-test code reaches nothing nondeterministic directly:
// no goroutine, clock, timer, wall-clock deadline or global randomness
// other than through the seam, internal/sched. A simulator runs this code
// with a fake seam, so a direct use would escape it. Extend the list as
// more parts move behind the seam; a directory that does not exist yet is
// skipped with a log line.
var guarded = []string{
	"replication",
	"node/shard",
	"node/clusterview",
	"sim",
	"node/persist",
}

// seamDir is the one place allowed to reach the real thing.
const seamDir = "internal/sched"

// forbidden names the package-level identifiers that reach
// nondeterminism, by import path; "*" is every identifier of the package
// except those in allowed (types and seeded constructors).
var forbidden = map[string][]string{
	"time":         {"Now", "Since", "Until", "NewTicker", "NewTimer", "After", "AfterFunc", "Sleep", "Tick"},
	"context":      {"WithTimeout", "WithTimeoutCause", "WithDeadline", "WithDeadlineCause"},
	"math/rand":    {"*"},
	"math/rand/v2": {"*"},
}

// allowed are identifiers of a "*" package that draw nothing: types and
// constructors of generators seeded by their caller.
var allowed = map[string][]string{
	"math/rand":    {"Rand", "Source", "Source64", "Zipf", "New", "NewSource", "NewZipf"},
	"math/rand/v2": {"Rand", "Source", "PCG", "ChaCha8", "Zipf", "New", "NewPCG", "NewChaCha8", "NewZipf"},
}

// exemption lets one use stand, in one function of one file, for a
// reason written next to it.
type exemption struct {
	file string // module-relative
	fn   string // enclosing function ("" at package level); methods as Type.Method
	use  string // "go" or "pkg.Name" as reported
	why  string
}

// exemptions is empty: every use on the guarded paths goes through the
// seam. Add one only with a reason a reviewer can check.
var exemptions = []exemption{}

// use is one direct reach for nondeterminism.
type use struct {
	file, fn, what string
	line           int
}

func (u use) String() string {
	return fmt.Sprintf("%s:%d: %s in %s", u.file, u.line, u.what, orTop(u.fn))
}

func orTop(fn string) string {
	if fn == "" {
		return "package level"
	}
	return fn
}

func TestNondeterminismGoesThroughTheSeam(t *testing.T) {
	root := moduleRoot(t)
	var found []use
	for _, dir := range guarded {
		abs := filepath.Join(root, filepath.FromSlash(dir))
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			t.Logf("guarded directory %s does not exist yet; skipped", dir)
			continue
		}
		uses, err := scanDir(root, abs)
		if err != nil {
			t.Fatalf("scanning %s: %v", dir, err)
		}
		found = append(found, uses...)
	}
	used := make([]bool, len(exemptions))
	for _, u := range found {
		if i := exempted(u); i >= 0 {
			used[i] = true
			continue
		}
		t.Errorf("%s: use the seam (%s) instead", u, seamDir)
	}
	for i, e := range exemptions {
		if !used[i] {
			t.Errorf("exemption %s %s in %s (%s) matches nothing: remove it", e.file, e.use, orTop(e.fn), e.why)
		}
	}
}

func exempted(u use) int {
	return slices.IndexFunc(exemptions, func(e exemption) bool {
		return e.file == u.file && e.fn == u.fn && e.use == u.what
	})
}

// scanDir reports the uses in the non-test Go files under dir (except the
// seam's own directory and testdata).
func scanDir(root, dir string) ([]use, error) {
	var out []use
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "testdata" || under(rel, seamDir) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		uses, err := scanFile(path, rel)
		out = append(out, uses...)
		return err
	})
	return out, err
}

// scanFile parses one file and lists its uses: go statements and the
// forbidden identifiers, called or not (a clock passed as a value, such as
// Now: time.Now, reads the clock as surely as a call).
func scanFile(path, rel string) ([]use, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	return scanAST(fset, f, rel), nil
}

func scanAST(fset *token.FileSet, f *ast.File, rel string) []use {
	imports := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if _, ok := forbidden[p]; !ok {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if p == "math/rand/v2" {
			name = "rand"
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	var out []use
	for _, decl := range f.Decls {
		fn := funcName(decl)
		ast.Inspect(decl, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				out = append(out, use{file: rel, fn: fn, what: "go", line: fset.Position(n.Pos()).Line})
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				p, ok := imports[id.Name]
				if ok && reaches(p, n.Sel.Name) {
					out = append(out, use{file: rel, fn: fn, what: id.Name + "." + n.Sel.Name, line: fset.Position(n.Pos()).Line})
				}
			}
			return true
		})
	}
	return out
}

// reaches reports whether identifier name of package path is forbidden.
func reaches(path, name string) bool {
	names := forbidden[path]
	if slices.Contains(names, name) {
		return true
	}
	return slices.Contains(names, "*") && !slices.Contains(allowed[path], name)
}

func funcName(decl ast.Decl) string {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok {
		return ""
	}
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestGuardFindsUses checks the scanner itself on made-up code, so a guard
// that can never fail is caught.
func TestGuardFindsUses(t *testing.T) {
	src := `package p

import (
	"context"
	mrand "math/rand/v2"
	"time"
)

var clock = time.Now

func (r *R) run(ctx context.Context) {
	go r.loop()
	t := time.NewTicker(time.Second)
	_, cancel := context.WithTimeout(ctx, time.Second)
	cancel()
	_ = mrand.Uint64()
	_ = mrand.New(mrand.NewPCG(1, 2))
	_ = time.Duration(0)
	_ = context.WithoutCancel(ctx)
	_ = t
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range scanAST(fset, f, "p.go") {
		got = append(got, u.String())
	}
	want := []string{
		"p.go:9: time.Now in package level",
		"p.go:12: go in R.run",
		"p.go:13: time.NewTicker in R.run",
		"p.go:14: context.WithTimeout in R.run",
		"p.go:16: mrand.Uint64 in R.run",
	}
	if !slices.Equal(got, want) {
		t.Errorf("scan found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
