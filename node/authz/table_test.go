package authz

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// The role table of docs/security.md ("Who may call what"), checked
// against the code: the rows against the routes the node's HTTP muxes
// register (read from the source of nodeDirs) and the methods of the gRPC
// services it registers (from their descriptors); the cells against this package's policy (httpClass,
// grpcClass, decide).

const securityDoc = "../../docs/security.md"

type tableColumn struct {
	name string
	a    *Authorizer
	c    Caller
}

// tableColumns are the table's callers, in order, each judged by the
// policy it meets. node, gateway and admin are certificates under TLS
// (with the admin token and node proofs configured too); reader and
// anyone send no credential to a node with an admin token and a gossip
// key but no TLS (under TLS they cannot connect).
//
// A reader holds the read token (--read-token-file).
func tableColumns() []tableColumn {
	proof := func(context.Context) (string, bool) { return "", false }
	tls := New(Config{TLS: true, AdminToken: "t", NodeProof: proof})
	token := New(Config{AdminToken: "t", NodeProof: proof})
	return []tableColumn{
		{"node", tls, Caller{HasCert: true, Node: true, NodeID: "n2"}},
		{"gateway", tls, Caller{HasCert: true, Gateway: true}},
		{"admin", tls, Caller{HasCert: true, Admin: true}},
		{"reader", token, Caller{Reader: true}},
		{"anyone", token, Caller{}},
	}
}

// fixedRows are the table's rows that are not HTTP or gRPC (their own
// transports, outside this package): node only.
var fixedRows = []string{"Raft (every RPC)", "gossip (memberlist)"}

type tableRow struct {
	line  int
	cells []string // one per column: "yes" or "no" (the first word)
	also  string
}

// readRoleTable parses the table under "## Who may call what".
func readRoleTable(t *testing.T) (header []string, rows map[string]tableRow) {
	t.Helper()
	b, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows = map[string]tableRow{}
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Who may call what"
			continue
		case !in || !strings.HasPrefix(line, "|"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		switch {
		case header == nil:
			header = cells
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		if len(cells) != len(header) {
			t.Fatalf("%s:%d: %d cells, the header has %d: %s", securityDoc, i+1, len(cells), len(header), line)
		}
		name := strings.Trim(cells[0], "`")
		if _, dup := rows[name]; dup {
			t.Errorf("%s:%d: row %q is in the table twice", securityDoc, i+1, name)
		}
		r := tableRow{line: i + 1, also: cells[len(cells)-1]}
		for _, c := range cells[1 : len(cells)-1] {
			word, _, _ := strings.Cut(c, " ")
			if word != "yes" && word != "no" {
				t.Errorf("%s:%d: row %q: cell %q: want yes or no", securityDoc, i+1, name, c)
			}
			r.cells = append(r.cells, word)
		}
		rows[name] = r
	}
	if header == nil {
		t.Fatalf("%s: no table under \"## Who may call what\"", securityDoc)
	}
	return header, rows
}

// codeRow is one route or method of the code and what the policy gives it.
type codeRow struct {
	name  string
	where string
	cl    class
}

// nodeDirs are the packages whose source registers the node's HTTP routes
// and gRPC services.
var nodeDirs = []string{"..", "../api", "../opsapi", "../forwardauth", "../rls", "../keyringapi"}

// readSource parses the non-test Go files of nodeDirs.
func readSource(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, d := range nodeDirs {
		names, err := filepath.Glob(filepath.Join(d, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range names {
			if strings.HasSuffix(fn, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, fn, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	return fset, files
}

// httpRoutes reads the patterns the node's HTTP muxes register: calls of
// Handle, HandleFunc (and node/api's handle) whose pattern is a string
// literal or a string constant of the packages read. The catch-all "/" is
// left out (it answers 404 and 405).
func httpRoutes(t *testing.T, fset *token.FileSet, files []*ast.File) []codeRow {
	t.Helper()
	consts := map[string]string{} // "pkg.Name"
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							consts[f.Name.Name+"."+id.Name] = v
						}
					}
				}
			}
		}
	}
	var out []codeRow
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				if fn.Name != "handle" {
					return true
				}
			case *ast.SelectorExpr:
				if fn.Sel.Name != "Handle" && fn.Sel.Name != "HandleFunc" {
					return true
				}
			default:
				return true
			}
			pattern, ok := "", false
			switch a := call.Args[0].(type) {
			case *ast.BasicLit:
				if a.Kind == token.STRING {
					pattern, _ = strconv.Unquote(a.Value)
					ok = true
				}
			case *ast.SelectorExpr:
				if x, isIdent := a.X.(*ast.Ident); isIdent {
					pattern, ok = consts[x.Name+"."+a.Sel.Name]
				}
			case *ast.Ident:
				if a.Obj != nil {
					if _, param := a.Obj.Decl.(*ast.Field); param {
						return true // a helper passing its own pattern on (node/api's handle)
					}
				}
				pattern, ok = consts[f.Name.Name+"."+a.Name]
			}
			where := fset.Position(call.Pos()).String()
			if !ok {
				t.Errorf("%s: a route whose pattern is not a string constant: the table test cannot read it", where)
				return true
			}
			if pattern != "/" {
				out = append(out, codeRow{name: pattern, where: where, cl: httpPatternClass(pattern)})
			}
			return true
		})
	}
	if len(out) < 10 {
		t.Fatalf("read only %d routes from %v: did the registration change shape?", len(out), nodeDirs)
	}
	return out
}

var wildcard = regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)

// httpPatternClass is httpClass of a request the pattern matches.
func httpPatternClass(pattern string) class {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "GET", pattern
	}
	return httpClass(httptest.NewRequest(method, wildcard.ReplaceAllString(path, "$1"), nil))
}

// registered names the gRPC services the source registers (calls of
// RegisterXServer), with where.
func registered(fset *token.FileSet, files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if m := registerServer.FindStringSubmatch(sel.Sel.Name); m != nil {
						out[m[1]] = fset.Position(call.Pos()).String()
					}
				}
			}
			return true
		})
	}
	return out
}

var registerServer = regexp.MustCompile(`^Register(\w+)Server$`)

// grpcMethods lists every method of the gRPC services a node serves, and
// fails t for a service the source registers that is not among them.
func grpcMethods(t *testing.T, fset *token.FileSet, files []*ast.File) []codeRow {
	t.Helper()
	services := map[string]bool{}
	var out []codeRow
	for _, fd := range []protoreflect.FileDescriptor{weirv1.File_weir_v1_weir_proto,
		rlsv3.File_envoy_service_ratelimit_v3_rls_proto, healthpb.File_grpc_health_v1_health_proto,
		reflectionpb.File_grpc_reflection_v1_reflection_proto} {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			services[string(sd.Name())] = true
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				full := "/" + string(sd.FullName()) + "/" + string(md.Name())
				out = append(out, codeRow{name: string(sd.Name()) + "." + string(md.Name()), where: full, cl: grpcClass(full)})
			}
		}
	}
	reg := registered(fset, files)
	for name, where := range reg {
		if !services[name] {
			t.Errorf("%s registers the gRPC service %s: add its file descriptor to grpcMethods", where, name)
		}
	}
	if len(reg) < 7 {
		t.Fatalf("found %d gRPC service registrations in %v: did the registration change shape?", len(reg), nodeDirs)
	}
	return out
}

// TestRoleTable: docs/security.md's role table has a row for every route
// and method and none for what does not exist, and each cell says what
// node/authz decides. A "no" where node/authz lets the caller through is
// right only when "also checked" names the check that refuses it; calls
// that take refund items must say refunds are node only.
func TestRoleTable(t *testing.T) {
	header, rows := readRoleTable(t)
	cols := tableColumns()
	want := []string{"call"}
	for _, c := range cols {
		want = append(want, c.name)
	}
	want = append(want, "also checked")
	if strings.Join(header, "|") != strings.Join(want, "|") {
		t.Fatalf("%s: the role table's header is %q, want %q", securityDoc, header, want)
	}
	for _, name := range []string{"Reader", "Read"} {
		if _, ok := reflect.TypeFor[Caller]().FieldByName(name); ok && cols[3].c == (Caller{}) {
			t.Errorf("Caller has a %s role now: give the reader column its Caller in tableColumns, then update the table's reader column", name)
		}
	}
	seen := map[string]bool{}
	fset, files := readSource(t)
	for _, cr := range append(httpRoutes(t, fset, files), grpcMethods(t, fset, files)...) {
		if seen[cr.name] {
			continue // ServerReflection is served as v1 and v1alpha; one row
		}
		seen[cr.name] = true
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = "no"
			if c.a.decide(c.c, cr.cl) == nil {
				cells[i] = "yes"
			}
		}
		r, ok := rows[cr.name]
		if !ok {
			t.Errorf("%s: the role table has no row for %s (%s); node/authz gives it:\n| `%s` | %s | |",
				securityDoc, cr.name, cr.where, cr.name, strings.Join(cells, " | "))
			continue
		}
		for i, c := range cols {
			switch got := r.cells[i]; {
			case got == cells[i]:
			case got == "yes":
				t.Errorf("%s:%d: row %s, column %s: the table says yes, node/authz refuses it", securityDoc, r.line, cr.name, c.name)
			case r.also == "":
				t.Errorf("%s:%d: row %s, column %s: the table says no, node/authz lets it through; name the check that refuses it under \"also checked\", or write yes", securityDoc, r.line, cr.name, c.name)
			}
		}
		if cr.cl == checks && !strings.Contains(r.also, "refund") {
			t.Errorf("%s:%d: row %s takes refund items, which only nodes may send: say so under \"also checked\"", securityDoc, r.line, cr.name)
		}
	}
	for _, name := range fixedRows {
		seen[name] = true
		r, ok := rows[name]
		if !ok {
			t.Errorf("%s: the role table has no row %q", securityDoc, name)
			continue
		}
		if got := strings.Join(r.cells, " "); got != "yes"+strings.Repeat(" no", len(cols)-1) {
			t.Errorf("%s:%d: row %q says %q; only nodes may speak it", securityDoc, r.line, name, got)
		}
	}
	for name, r := range rows {
		if !seen[name] {
			t.Errorf("%s:%d: row %q names no route or method the node serves: remove it or correct its name", securityDoc, r.line, name)
		}
	}
}
