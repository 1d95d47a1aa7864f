package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/weirlimit/weir"

// listedPackage is the part of `go list -json` output the dependency rules
// read. Deps is the transitive closure of non-test imports.
type listedPackage struct {
	ImportPath string
	Standard   bool
	DepOnly    bool
	GoFiles    []string
	Deps       []string
	Imports    []string // direct, non-test
	Error      *struct{ Err string }
}

// depRule constrains the non-test dependencies (direct and transitive) of
// packages of this module (see covers). With only non-nil, every dependency
// must be in the standard library or under one of its paths; every
// dependency under a path in never fails, unless it is under a path in
// except.
type depRule struct {
	pkg      string // module-relative, e.g. "bucket"
	required bool   // fail if the package does not exist
	only     []string
	never    []string
	except   []string
	why      string
}

// rules is the dependency table of DESIGN.md ("Packages").
var rules = []depRule{
	{pkg: "bucket", required: true, only: []string{},
		why: "bucket is pure: standard library only"},
	{pkg: "ring", required: true,
		only: []string{"github.com/buraksezer/consistent", "github.com/cespare/xxhash/v2"},
		why:  "ring maps members to partitions and opens no sockets"},
	{pkg: "rulesraft/rules",
		only: []string{module + "/bucket", module + "/limit", "gopkg.in/yaml.v3"},
		why:  "the rule model is pure so a gateway can link it without Raft or gRPC"},
	{pkg: "client",
		never:  []string{module + "/node", module + "/rulesraft", "github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/raft-boltdb/v2"},
		except: []string{module + "/rulesraft/rules"},
		why:    "the gateway SDK links ring, bucket, proto and the pure rule model only"},
	{pkg: "replication", never: []string{module + "/rulesraft"},
		why: "replication ships counter states and knows no rule semantics"},
	{pkg: "bucket", never: []string{module + "/node"}, why: "dependencies point away from node"},
	{pkg: "ring", never: []string{module + "/node"}, why: "dependencies point away from node"},
	{pkg: "replication", never: []string{module + "/node"}, why: "dependencies point away from node"},
	{pkg: "rulesraft", never: []string{module + "/node"}, why: "dependencies point away from node"},
	{pkg: "internal/tlsconf", required: true, never: []string{module + "/node", module + "/rulesraft", module + "/client", module + "/replication"},
		why: "TLS files, identities and the CA know nothing of the cluster they secure"},
	{pkg: "node/authz", required: true, never: []string{module + "/node/api", module + "/rulesraft", module + "/replication"},
		why: "the role policy sits in front of the edges and knows no rule or counter"},
	{pkg: "region/share", required: true, only: []string{"github.com/cespare/xxhash/v2"},
		why: "the cross-region allocator is pure: no I/O, no clock, no goroutines"},
	{pkg: "internal/sched", required: true, only: []string{},
		why: "the seam for goroutines, clocks, timers and randomness is standard library only (no grpc, memberlist or raft)"},
	{pkg: "internal/sched/schedtest", required: true, only: []string{module + "/internal/sched"},
		why: "the deterministic seam links nothing but the seam"},
	{pkg: "internal/bug", required: true, only: []string{},
		why: "the re-inserted defects' switches are standard library only (a constant false outside the weirbugs tag)"},
	{pkg: "region", never: []string{module + "/node", module + "/rulesraft"},
		why: "the region shell knows ownership through a small interface, not the node"},
	{pkg: "node/clusterview", required: true,
		never: []string{"google.golang.org/grpc", "github.com/hashicorp/memberlist", "github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/raft-boltdb/v2", module + "/rulesraft", module + "/node/api"},
		why:   "the ring-view policy, the member book, the quorum watch, leave and join run without sockets: a simulator assembles them in one process"},
	{pkg: "node/membership", required: true,
		never: []string{module + "/node"}, except: []string{module + "/node/clusterview"},
		why: "membership (gossip, the member book, the cluster view, join and leave) reaches the other node parts only through the small interfaces it defines (Prover, Admitter, Handoff, RaftGroup, Dialer, ...); its decisions are clusterview's"},
	{pkg: "node/identity", required: true,
		never: []string{"github.com/hashicorp/memberlist", "github.com/hashicorp/raft", module + "/node", module + "/node/api", module + "/rulesraft", module + "/replication"},
		why:   "binding node credentials to membership reads the node's members through a small interface; it knows no transport, gossip or Raft"},
	{pkg: "sim", required: true,
		never: []string{"google.golang.org/grpc", "github.com/hashicorp/memberlist", "github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/raft-boltdb/v2"},
		why:   "the simulator assembles nodes' parts in one process over in-memory transports: no sockets, gossip or Raft"},
	{pkg: "client/reqmatch", required: true,
		only: []string{module + "/rulesraft/rules", module + "/limit", module + "/bucket", "github.com/cespare/xxhash/v2", "gopkg.in/yaml.v3"},
		why:  "request matching is pure, shared by the SDK middleware and the nodes' forward-auth endpoint"},
	{pkg: "node/persist", required: true, only: []string{module + "/replication", module + "/internal/sched", module + "/internal/bug"},
		why: "durable counters: a pure file format and a thin writer over counter states; no rule, ring or transport"},
	{pkg: "node/ops", required: true,
		never: []string{"github.com/hashicorp/memberlist", module + "/ring", module + "/replication", module + "/node/shard", module + "/node/clusterview", module + "/node/persist", module + "/node/rls", module + "/node/forwardauth"},
		why:   "the operators' view reads members, rules and permits through its small interfaces (ops.RuleView, Store, Members, Permits): no gossip, ring, counters or replication"},
	{pkg: "client", never: otelSDK, why: "the gateway SDK uses the OpenTelemetry API only; exporters live in the weir binary"},
	{pkg: "node", never: otelSDK, why: "nodes take a trace.TracerProvider (the OpenTelemetry API); exporters live in the weir binary"},
	{pkg: "internal/tracing", required: true,
		only: []string{module + "/limit", module + "/bucket", "github.com/cespare/xxhash/v2", "go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/propagation",
			"go.opentelemetry.io/otel/baggage", "go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes", "go.opentelemetry.io/otel/internal", "go.opentelemetry.io/otel/semconv"},
		why: "the shared tracing helpers use the OpenTelemetry API only; internal/tracing/otlp alone builds the SDK and exporter"},
	{pkg: "node/security", required: true,
		never:  []string{module + "/node", "google.golang.org/grpc/health"},
		except: []string{module + "/node/security", module + "/node/authz", module + "/node/clusterview", module + "/node/identity"},
		why:    "the security part reads membership through its Members interface and serves no edge: node wires it, the edges call it"},
	{pkg: "node/keyringapi", required: true,
		never:  []string{module + "/node"},
		except: []string{module + "/node/keyringapi", module + "/node/api", module + "/node/authz", module + "/node/clusterview", module + "/node/identity", module + "/node/events"},
		why:    "the keyring HTTP edge reaches the keyring and the members through interfaces, not the node or its security part"},
	{pkg: "node/api", never: []string{module + "/node/security", module + "/node/keyringapi"},
		why: "the edges below the parts do not import them; only node and cmd do"},
	{pkg: "node/authz", never: []string{module + "/node/security", module + "/node/keyringapi"},
		why: "the role policy is a leaf the security part builds on"},
	{pkg: "internal/httpjson", required: true, only: []string{},
		why: "the one JSON answer writer of the HTTP edges is standard library only"},
	{pkg: "node/forward", required: true,
		never: []string{module + "/node", module + "/rulesraft", module + "/replication", "github.com/hashicorp/memberlist", "github.com/hashicorp/raft"},
		why:   "the forwarders and the peer connections take member addresses, credentials and metrics at construction; they know no node part, rule store, gossip or Raft"},
	{pkg: "node/peer", required: true,
		never:  []string{module + "/node", "github.com/hashicorp/memberlist"},
		except: []string{module + "/node/api", module + "/node/authz", module + "/node/events"},
		why:    "the Peer gRPC edge decides, guards and stores through interfaces of its own (Checker, Guard, Identity, Replicas, Holder, Conns); of the node's packages it links only node/api's one error mapping (and gossip never)"},
	{pkg: "internal/rulecache", required: true,
		only: []string{module + "/rulesraft/rules", module + "/limit", module + "/bucket", "gopkg.in/yaml.v3"},
		why:  "the one compiled-rule-set cache links the pure rule model only, so the check path and both proxy edges share it"},
	{pkg: "node/router", required: true,
		never: []string{"google.golang.org/grpc", "github.com/hashicorp/memberlist", "github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/raft-boltdb/v2",
			module + "/node", module + "/rulesraft", module + "/region", module + "/proto"},
		except: []string{module + "/node/shard", module + "/rulesraft/rules"},
		why:    "the check path meets the rule store, forwards, membership, regions and observers through interfaces it defines: no sockets, gossip or Raft, no other node part"},
	{pkg: "limit", required: true, only: []string{module + "/bucket"},
		why: "the check vocabulary (items, results, the validator, error kinds) is pure, so the core, every edge and the gateway share it without a wire format"},
}

// nodeParts are the parts package node wires: only node imports them
// (and the weir binary and tests); they meet through interfaces.
var nodeParts = []string{"node/ops", "node/security"}

// TestNodePartsImportedByNodeOnly: no package but node (and cmd) imports
// a node part, so a part's state is reached only through node's
// wiring.
func TestNodePartsImportedByNodeOnly(t *testing.T) {
	pkgs := listModule(t)
	for _, part := range nodeParts {
		full := module + "/" + part
		if pkgs[full] == nil {
			t.Errorf("node part %s does not exist", full)
			continue
		}
		for _, p := range pkgs {
			if p.DepOnly || !under(p.ImportPath, module) || !importedBy(p, full) || p.ImportPath == full {
				continue
			}
			if !partMayImport(p.ImportPath, full) {
				t.Errorf("%s imports node part %s: only node and cmd may", p.ImportPath, full)
			}
		}
	}
	if partMayImport(module+"/node/api", module+"/node/ops") || !partMayImport(module+"/node", module+"/node/ops") ||
		!partMayImport(module+"/cmd/weir", module+"/node/ops") || !partMayImport(module+"/node/ops/x", module+"/node/ops") {
		t.Error("partMayImport: want node, cmd and the part's own sub-packages only")
	}
}

func importedBy(p *listedPackage, dep string) bool { return slices.Contains(p.Imports, dep) }

// partMayImport reports whether package path may depend on node part part.
func partMayImport(path, part string) bool {
	return path == module+"/node" || under(path, module+"/cmd") || under(path, part)
}

// otelSDK is the OpenTelemetry SDK and exporters, and the package that
// builds them: only the weir binary and tests may link them.
var otelSDK = []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/proto/otlp", module + "/internal/tracing/otlp"}

// under reports whether import path p is path or inside it.
func under(p, path string) bool {
	return p == path || strings.HasPrefix(p, path+"/")
}

func TestDependencyRules(t *testing.T) {
	pkgs := listModule(t)

	for _, r := range rules {
		full := module + "/" + r.pkg
		var checked []string
		for _, p := range pkgs {
			if p.DepOnly || !r.covers(p.ImportPath) {
				continue
			}
			if p.Error != nil {
				t.Errorf("%s: go list: %s (cannot check: %s)", p.ImportPath, p.Error.Err, r.why)
				continue
			}
			checked = append(checked, p.ImportPath)
			for _, d := range p.Deps {
				if bad := r.violates(d, pkgs[d]); bad != "" {
					t.Errorf("%s imports %s (%s): %s", p.ImportPath, d, bad, r.why)
				}
			}
		}
		switch {
		case len(checked) > 0:
		case r.required:
			t.Errorf("package %s does not exist (or has no Go files); it must", full)
		default:
			t.Logf("package %s does not exist yet; rule %q skipped", full, r.why)
		}
	}
}

// covers reports whether r applies to package path: an allow-list rule to
// the package itself (its sub-packages are separate packages; if it imports
// them, their dependencies are its dependencies and are checked), a
// deny-list rule to the package and everything under it.
func (r depRule) covers(path string) bool {
	full := module + "/" + r.pkg
	if r.only != nil {
		return path == full
	}
	return under(path, full)
}

// violates explains why dependency d breaks r, or returns "".
func (r depRule) violates(d string, info *listedPackage) string {
	for _, e := range r.except {
		if under(d, e) {
			return ""
		}
	}
	for _, n := range r.never {
		if under(d, n) {
			return "forbidden"
		}
	}
	if r.only == nil {
		return ""
	}
	if info != nil && info.Standard {
		return ""
	}
	for _, ok := range r.only {
		if under(d, ok) {
			return ""
		}
	}
	return "not in the allowed list"
}

// TestDepRuleMatching checks the rule logic itself on made-up paths, so a
// rule that can never fail is caught.
func TestDepRuleMatching(t *testing.T) {
	client := rules[3]
	limitRule := rules[len(rules)-1]
	routerRule := rules[len(rules)-2]
	cases := []struct {
		r    depRule
		dep  string
		info *listedPackage
		bad  bool
	}{
		{rules[0], "fmt", &listedPackage{Standard: true}, false},
		{rules[0], "github.com/cespare/xxhash/v2", nil, true},
		{rules[1], "github.com/cespare/xxhash/v2", nil, false},
		{rules[1], "github.com/cespare/xxhash/v2x", nil, true},
		{rules[1], module + "/bucket", nil, true},
		{rules[2], module + "/bucket", nil, false},
		{rules[2], "github.com/hashicorp/raft", nil, true},
		{rules[2], "google.golang.org/grpc", nil, true},
		{client, module + "/rulesraft/rules", nil, false},
		{client, module + "/rulesraft", nil, true},
		{client, module + "/rulesraft/fsm", nil, true},
		{client, module + "/node", nil, true},
		{client, "github.com/hashicorp/raft", nil, true},
		{client, "github.com/hashicorp/raft-boltdb/v2", nil, true},
		{client, module + "/ring", nil, false},
		{client, "google.golang.org/grpc", nil, false},
		{rules[4], module + "/rulesraft/rules", nil, true},
		{rules[5], module + "/node/shard", nil, true},
		{routerRule, module + "/node/shard", nil, false},
		{routerRule, module + "/rulesraft/rules", nil, false},
		{routerRule, module + "/node/api", nil, true},
		{routerRule, module + "/rulesraft", nil, true},
		{routerRule, "google.golang.org/grpc", nil, true},
		{limitRule, module + "/bucket", nil, false},
		{limitRule, "unicode/utf8", &listedPackage{Standard: true}, false},
		{limitRule, module + "/proto/weirv1", nil, true},
		{limitRule, "google.golang.org/grpc", nil, true},
		{limitRule, module + "/limit/limitpb", nil, true},
	}
	if !limitRule.covers(module+"/limit") || limitRule.covers(module+"/limit/limitpb") {
		t.Error("the limit rule must cover the limit package and not limitpb")
	}
	if !rules[2].covers(module+"/rulesraft/rules") || rules[2].covers(module+"/rulesraft/rules/rulespb") {
		t.Error("an allow-list rule must cover exactly its package")
	}
	if !client.covers(module+"/client/middleware") || client.covers(module+"/clientele") {
		t.Error("a deny-list rule must cover its package tree and nothing else")
	}
	for _, c := range cases {
		if got := c.r.violates(c.dep, c.info) != ""; got != c.bad {
			t.Errorf("rule for %s, dep %s: violates = %v, want %v", c.r.pkg, c.dep, got, c.bad)
		}
	}
}

// listModule runs `go list -e -json -deps ./...` at the module root and
// returns every listed package by import path.
func listModule(t *testing.T) map[string]*listedPackage {
	t.Helper()
	root := moduleRoot(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-e", "-json", "-deps", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	if len(pkgs) == 0 {
		t.Fatal("go list returned no packages")
	}
	return pkgs
}

// moduleRoot walks up from the working directory to this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && slices.Contains(strings.Fields(firstLine(string(data))), module) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod for module %s above the working directory", module)
		}
		dir = parent
	}
}

func firstLine(s string) string {
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, "module ") {
			return line
		}
	}
	return ""
}
