package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
)

// permitsCLIRules are opsCLIRules and a concurrency rule of apikeys.
const permitsCLIRules = opsCLIRules + `  - id: jobs
    match: {route: /jobs}
    key: apikey
    algorithm: concurrency
    limit: 5
    permit_ttl: 5m
`

// weir limits shows a PERMITS HELD column when a rule of the key's type
// is a concurrency rule: the permits the key holds now under it, "-" for
// the other rules; and no such column for a key type without one.
func TestLimitsPermitsColumn(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules(permitsCLIRules)
	addr := "http://" + c.Nodes[0].HTTPAddr()
	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post("http://"+c.Nodes[1].HTTPAddr()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s %s: %s %v %v", path, body, resp.Status, out, err)
		}
		return out
	}
	var permits []string
	for range 3 {
		res := post("/v1/limits/check", `{"key":"apikey:j","rule":"jobs"}`)
		p, _ := res["permit"].(string)
		if res["allowed"] != true || p == "" {
			t.Fatalf("check: %v, want a permit", res)
		}
		permits = append(permits, p)
	}
	if res := post("/v1/limits/release", fmt.Sprintf(`{"key":"apikey:j","rule":"jobs","permit":%q}`, permits[0])); res["released"] != true {
		t.Fatalf("release: %v", res)
	}

	r := runCLI(t, "", nil, "limits", "apikey:j", "--addr", addr)
	if r.code != 0 {
		t.Fatalf("weir limits apikey:j: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rows := map[string][]string{}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if h := strings.Fields(lines[0]); len(h) != 8 || strings.Join(h[5:], " ") != "VERSION PERMITS HELD" {
		t.Fatalf("header %q, want RULE REMAINING LIMIT RESET AT VERSION PERMITS HELD\n%s", lines[0], r.stdout)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	// RULE REMAINING LIMIT RESET VERSION PERMITS
	if f := rows["jobs"]; len(f) != 6 || f[1] != "3" || f[2] != "5" || f[5] != "2" {
		t.Errorf("jobs row %q, want 3 remaining of 5 and 2 permits held\n%s", f, r.stdout)
	}
	if f := rows["burst2"]; len(f) != 6 || f[5] != "-" {
		t.Errorf("burst2 row %q, want - for permits held (not a concurrency rule)\n%s", f, r.stdout)
	}

	r = runCLI(t, "", nil, "limits", "apikey:j", "-o", "json", "--addr", addr)
	var la limitsAnswer
	if err := json.Unmarshal([]byte(r.stdout), &la); err != nil || len(la.Limits) != 2 {
		t.Fatalf("limits -o json: %v %s", err, r.stdout)
	}
	for _, l := range la.Limits {
		switch {
		case l.Rule == "jobs" && (l.PermitsHeld == nil || *l.PermitsHeld != 2):
			t.Errorf("jobs permits_held %v, want 2", l.PermitsHeld)
		case l.Rule == "burst2" && l.PermitsHeld != nil:
			t.Errorf("burst2 permits_held %d, want none", *l.PermitsHeld)
		}
	}

	r = runCLI(t, "", nil, "limits", "global:global", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "glob") || strings.Contains(r.stdout, "PERMITS") {
		t.Errorf("weir limits global:global (no concurrency rule): exit %d, want no PERMITS HELD column\n%s%s", r.code, r.stdout, r.stderr)
	}
}
